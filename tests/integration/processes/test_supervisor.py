"""Preparing a run: the interpreter `python` means, the SDK copy for foreign venvs, the dry run."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from phalanx.backends.local.engine import with_interpreter
from phalanx.config import Settings
from phalanx.domain import Framework
from phalanx.plan import build_plan
from phalanx.sdkcopy import sdk_path
from phalanx.spec.model import ExperimentSpec, Topology
from phalanx.supervisor import Outcome, dry_run_json, prepare, render_dry_run


def test_python_at_the_start_of_each_command_means_the_experiments_interpreter() -> None:
    cmd = "python prep.py && cd sub && python3 -u train.py; echo python"
    assert with_interpreter(cmd, "/v/bin/python") == (
        "/v/bin/python prep.py && cd sub && /v/bin/python -u train.py; echo python"
    )


def test_outcomes_map_to_the_documented_exit_statuses() -> None:
    from phalanx.domain import ExperimentStatus as S

    assert [Outcome("x", s).exit_code for s in (S.SUCCEEDED, S.FAILED, S.STOPPED)] == [0, 1, 130]


def test_dry_run_shows_each_replicas_argv_cwd_and_env_and_writes_nothing(
    phalanx_home: Path, tmp_path: Path
) -> None:
    spec = ExperimentSpec(
        version=1,
        kind="experiment",
        command=("python train.py",),
        framework=Framework.PYTORCH,
        topology=Topology(n_workers=1),
    )
    prepared = prepare(spec, settings=Settings(), workdir=tmp_path, dry=True)
    doc = dry_run_json(prepared)
    names = [r["name"] for r in doc["replicas"]]
    assert names == ["master", "worker-0"]
    worker = doc["replicas"][1]
    assert worker["cwd"] == str(tmp_path.resolve())
    assert worker["processes"][0]["argv"] == ["/bin/sh", "-c", f"{sys.executable} train.py"]
    env = worker["processes"][0]["env"]
    assert env["RANK"] == "1" and env["PHALANX_REPLICA"] == "worker-0" and env["PHALANX_CAPTURED"] == "1"
    assert env["PHALANX_SPOOL"] == str(phalanx_home / "spool" / prepared.experiment_id)
    assert "MASTER_PORT=" in render_dry_run(prepared)
    assert list(phalanx_home.iterdir()) == []  # no store, no run folder, no spool


def test_the_sdk_copy_imports_with_a_bare_interpreter(phalanx_home: Path) -> None:
    """Inside a foreign venv only the copy is on PYTHONPATH: it must need nothing but the stdlib."""
    python = shutil.which("python3", path="/usr/bin:/usr/local/bin") or sys.executable
    path = sdk_path(Settings().home)
    assert path == sdk_path(Settings().home)  # made once, reused
    out = subprocess.run(
        [python, "-S", "-c", "import phalanx.spool, phalanx; print(phalanx.__file__)"],
        env={"PYTHONPATH": str(path)},
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().startswith(str(path))


def test_a_plan_is_accepted_as_well_as_a_spec(phalanx_home: Path, tmp_path: Path) -> None:
    spec = ExperimentSpec(version=1, kind="experiment", command=("true",))
    prepared = prepare(build_plan(spec), settings=Settings(), workdir=tmp_path, dry=True)
    assert [u["name"] for u in prepared.dry_run.native["units"]] == ["master"]


@pytest.mark.parametrize("gpus", [1])
def test_a_gpu_request_on_a_machine_without_one_is_refused_before_anything(
    phalanx_home: Path, tmp_path: Path, gpus: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from phalanx.domain import Range, Resources
    from phalanx.errors import UsageError
    from phalanx.machine import limits
    from phalanx.spec.model import ReplicaTemplate

    monkeypatch.setattr(limits, "detect_gpus", lambda: ())
    spec = ExperimentSpec(
        version=1,
        kind="experiment",
        command=("true",),
        master=ReplicaTemplate(resources=Resources(gpu=Range(gpus, gpus))),
    )
    with pytest.raises(UsageError, match="GPU"):
        prepare(spec, settings=Settings(), workdir=tmp_path, dry=True)


def test_local_replicas_learn_the_supervisors_pid_and_remote_ones_do_not(
    phalanx_home: Path, tmp_path: Path
) -> None:
    """flush() in a local replica stops waiting once the supervisor (its ingester) is gone; on Slurm
    or Kubernetes a pid of this machine means nothing, so none is passed there."""
    import os
    from dataclasses import replace

    from phalanx.backends.kubernetes import KubernetesBackend
    from phalanx.backends.slurm import SlurmBackend
    from phalanx.clusters import Cluster
    from phalanx.supervisor.preparing import ingester_here

    spec = ExperimentSpec(
        version=1,
        kind="experiment",
        command=("python train.py",),
        framework=Framework.PYTORCH,
        topology=Topology(n_workers=1),
    )

    def pids(prepared: object) -> list[str | None]:
        units = prepared.dry_run.native["units"]  # type: ignore[attr-defined]
        return [p["env"].get("PHALANX_INGESTER_PID") for u in units for p in u["processes"]]

    local = prepare(spec, settings=Settings(), workdir=tmp_path)
    assert pids(local) == [str(os.getpid())] * 2
    assert pids(prepare(spec, settings=Settings(), workdir=tmp_path, dry=True)) == [None, None]
    # prepared in another process than the one that supervises: redone with the supervisor's pid
    elsewhere = replace(local, context=replace(local.context, tracking_env={"PHALANX_INGESTER_PID": "1"}))
    assert pids(ingester_here(elsewhere)) == [str(os.getpid())] * 2
    in_cluster = Cluster(name="k8s", kind="kubernetes", server_url="http://phalanx.ml.svc:8000")
    hpc = Cluster(name="s", kind="slurm", shared_dir=str(tmp_path))
    for backend in (
        SlurmBackend(hpc),
        KubernetesBackend(cluster=in_cluster, put_code=lambda url, data: None),
    ):
        remote = prepare(spec, settings=Settings(), workdir=tmp_path, backend=backend)
        assert "PHALANX_INGESTER_PID" not in remote.context.tracking_env
        assert "PHALANX_INGESTER_PID" not in remote.dry_run.render()
        assert ingester_here(remote) is remote
