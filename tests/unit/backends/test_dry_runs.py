"""Each engine's dry run is a typed value (its own DryRun subclass, read by attribute) that still
renders in the engine's own format, and an engine refuses to submit another engine's dry run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from phalanx.backends.dry_runs import LocalDryRun, SlurmDryRun
from phalanx.backends.kube_objects import KubeDryRun
from phalanx.backends.kubernetes import KubernetesBackend
from phalanx.backends.local.engine import LocalBackend
from phalanx.backends.slurm import SlurmBackend
from phalanx.clusters import Cluster
from phalanx.config import Settings
from phalanx.domain import Framework
from phalanx.errors import UsageError
from phalanx.spec.model import ReplicaTemplate
from tests.unit.backends.conftest import context, plan, resources


def test_the_local_dry_run_is_typed_units_of_processes(tmp_path: Path) -> None:
    dry = LocalBackend(Settings(home=str(tmp_path))).dry_run(plan(workers=1), context())
    assert isinstance(dry, LocalDryRun)
    assert [u.name for u in dry.units] == ["master", "worker-0"]
    master = dry.units[0]
    assert master.replicas == ("master",) and master.cwd == "/work/exp"
    assert "/opt/venv/bin/python -u train.py" in " ".join(master.processes[0].argv)
    assert master.processes[0].env["RANK"] == "0"
    native = json.loads(dry.render())  # the engine's own format: JSON, as before
    assert native == dry.native and native["units"][1]["processes"][0]["env"]["RANK"] == "1"
    assert "# master" in dry.text() and "argv: " in dry.text()


def test_the_slurm_and_kubernetes_dry_runs_carry_their_request(tmp_path: Path) -> None:
    settings = Settings(home=str(tmp_path))
    slurm = SlurmBackend(
        Cluster(name="s", kind="slurm", shared_dir=str(tmp_path / "shared")), settings
    ).dry_run(plan(), context())
    assert isinstance(slurm, SlurmDryRun) and slurm.format == "sbatch"
    assert slurm.script.startswith("#!") and slurm.render() == slurm.script == slurm.native
    kube = KubernetesBackend(
        settings, Cluster(name="k", kind="kubernetes", namespace="ml", server_url="http://p:8000")
    ).dry_run(plan(), context())
    assert isinstance(kube, KubeDryRun) and kube.format == "yaml"
    assert kube.objects[0]["kind"] == "ConfigMap" and kube.native == list(kube.objects)


def test_an_engine_refuses_a_dry_run_made_by_another(tmp_path: Path) -> None:
    settings = Settings(home=str(tmp_path))
    local = LocalBackend(settings).dry_run(plan(), context())
    with pytest.raises(UsageError, match="slurm engine cannot submit a dry run made by 'local'"):
        SlurmBackend(Cluster(name="s", kind="slurm", shared_dir=str(tmp_path / "shared")), settings).submit(
            local
        )


def test_a_tensorflow_replica_pinned_to_one_core_gets_two_inter_op_threads(tmp_path: Path) -> None:
    """TensorFlow sizes its inter-op pool by the cores it may use: one pinned core made a pool of one
    thread and a parameter-server worker deadlocked (issue 39); the file's own setting wins."""
    one_core = ReplicaTemplate(resources=resources(cpu=1))
    tf = plan(Framework.TENSORFLOW, workers=2, ps=1, default_worker=one_core)
    dry = LocalBackend(Settings(home=str(tmp_path))).dry_run(tf, context())
    env = {u.name: u.processes[0].env for u in dry.units}
    assert env["worker-0"]["TF_NUM_INTEROP_THREADS"] == "2"
    assert env["worker-0"]["TF_NUM_INTRAOP_THREADS"] == "1"
    assert env["worker-1"]["TF_NUM_INTEROP_THREADS"] == "2"
    assert "TF_NUM_INTEROP_THREADS" not in env["master"]  # no limit: TensorFlow's own default
    own = plan(Framework.TENSORFLOW, default_worker=one_core, env={"TF_NUM_INTEROP_THREADS": "3"})
    dry = LocalBackend(Settings(home=str(tmp_path))).dry_run(own, context())
    assert dry.units[1].processes[0].env["TF_NUM_INTEROP_THREADS"] == "3"
    torch = plan(default_worker=one_core)  # other frameworks get OMP/MKL only
    dry = LocalBackend(Settings(home=str(tmp_path))).dry_run(torch, context())
    assert "TF_NUM_INTEROP_THREADS" not in dry.units[1].processes[0].env
