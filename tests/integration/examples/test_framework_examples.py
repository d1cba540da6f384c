"""The framework examples run end to end through `phalanx run`: exit 0, the experiment succeeded,
and the accuracy each script reports through `phalanx.Task` is in the store.

The TensorFlow, MXNet and Horovod examples run with every replica at `cpu: {limits: 1}` (`one_core`),
as on a small machine: the local engine pins each to one core with OMP/MKL at 1 thread, which once
hung a TensorFlow parameter-server worker for ever (issue 39: its inter-op pool of one thread). The
PyTorch DDP example ships with limit 1 per replica (tests/integration/local/test_run_cli.py runs it).

The TensorFlow and MXNet examples run in venvs built from their `build.pip_packages`. Building one
takes ~30 s and 1.6 GB, so every test's PHALANX_HOME links its `venvs` folder to one cache shared by
all test runs on the machine (`$PHALANX_TEST_VENVS`, default ~/.cache/phalanx/venvs); buildenv's lock
makes concurrent test workers build each venv once.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.conftest import REPO
from tests.support.cli import phalanx_cli

PHALANX = Path(sys.executable).parent / "phalanx"
EXAMPLES = REPO / "examples"
RUN_TIMEOUT = 420  # covers a first build of the TensorFlow venv on a busy 2-core machine


def shared_venvs() -> Path:
    path = Path(os.environ.get("PHALANX_TEST_VENVS", Path.home() / ".cache" / "phalanx" / "venvs"))
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture
def home(phalanx_home: Path) -> Path:
    (phalanx_home / "venvs").symlink_to(shared_venvs(), target_is_directory=True)
    return phalanx_home


def phalanx(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run the CLI in its own process group; on a timeout the whole group goes (no leaked replicas)."""
    proc = subprocess.Popen(
        [str(PHALANX), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"phalanx {' '.join(args)} ran over {timeout} s\n{out[-3000:]}\n{err[-3000:]}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def one_core(name: str, folder: Path, restarts: int = 0) -> Path:
    """The example's file with `cpu: {limits: 1}` for the master, every worker and every ps, written
    into ``folder`` (run it with `--workdir` the example's folder and `--oversubscribe`: the replicas
    are more than this machine's 2 cores, and each is pinned to one of them); ``restarts``: its
    run.max_restarts."""
    doc = yaml.safe_load((EXAMPLES / name / "polyaxonfile.yml").read_text())

    def limit() -> dict[str, Any]:  # a dict of its own each time: safe_dump would write aliases
        return {"cpu": {"limits": 1}}

    doc["environment"]["resources"] = limit()
    replicas = doc["environment"]["replicas"]
    replicas["default_worker"] = {"resources": limit()}
    if replicas.get("n_ps"):
        replicas["default_ps"] = {"resources": limit()}
    if restarts:
        doc["run"]["max_restarts"] = restarts
    path = folder / f"{name}-one-core.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def run_example(
    name: str, *extra: str, folder: Path | None = None, restarts: int = 0
) -> tuple[str, subprocess.CompletedProcess[str]]:
    """`phalanx run` the example (with ``folder``: at one core per replica, see ``one_core``);
    returns its experiment id and the finished process."""
    file = EXAMPLES / name / "polyaxonfile.yml"
    if folder is not None:
        file = one_core(name, folder, restarts)
        extra = (*extra, "--workdir", str(EXAMPLES / name), "--oversubscribe")
    done = phalanx("run", "-f", str(file), *extra, timeout=RUN_TIMEOUT)
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"phalanx run {name} exited {done.returncode}:\n{output[-6000:]}"
    assert "final test accuracy" in output, output[-4000:]
    listed = phalanx_cli("ls", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    experiments = json.loads(listed.stdout)
    rows = experiments.get("items", experiments) if isinstance(experiments, dict) else experiments
    assert len(rows) == 1, rows
    return str(rows[0]["id"]), done


def experiment(exp_id: str) -> dict[str, Any]:
    got = phalanx_cli("get", exp_id, "-o", "json")
    assert got.returncode == 0, got.stderr
    return dict(json.loads(got.stdout))


def spool_listing() -> str:
    """What the replicas wrote, for a failure message: which spool files exist and how big."""
    spool = Path(os.environ["PHALANX_HOME"]) / "spool"
    return "\n".join(f"{p.relative_to(spool)} {p.stat().st_size} B" for p in sorted(spool.rglob("*.spool")))


def accuracy_series(exp_id: str) -> dict[str, dict[str, list[float]]]:
    metrics = phalanx_cli("metrics", exp_id, "--title", "accuracy", "-o", "json")
    assert metrics.returncode == 0, f"{metrics.stderr}\nspool files:\n{spool_listing()}"
    return dict(json.loads(metrics.stdout)["accuracy"])


def final_accuracies(exp_id: str) -> dict[str, float]:
    return {series: points["values"][-1] for series, points in accuracy_series(exp_id).items()}


@pytest.mark.slow
def test_tensorflow_multi_worker_mirrored_trains_in_its_own_venv_on_one_core_each(
    home: Path, tmp_path: Path
) -> None:
    # 100 a replica (a global batch of 300): 8 collective steps an epoch instead of 25; 2 epochs score
    # 0.965 (0.927 after the first), well above the 0.9 asked (each epoch is seconds of collectives)
    exp_id, _ = run_example(
        "tensorflow-mwms", "--param", "epochs=2", "--param", "batch_size=100", folder=tmp_path
    )
    assert experiment(exp_id)["status"] == "succeeded"
    series = accuracy_series(exp_id)
    assert list(series) == ["test"]
    assert len(series["test"]["values"]) == 2  # one point per epoch, reported by the chief only
    assert series["test"]["values"][-1] >= 0.9
    loss = json.loads(phalanx_cli("metrics", exp_id, "--title", "loss", "-o", "json").stdout)["loss"]
    assert sorted(loss) == ["chief-0", "worker-0", "worker-1"]  # every replica reported its own series


@pytest.mark.slow
def test_tensorflow_parameter_server_succeeds_on_one_core_each_when_the_chief_is_done(
    home: Path, tmp_path: Path
) -> None:
    """At one core per replica a worker's inter-op pool used to be one thread and the job hung for
    ever after "coordinating 2 workers" (issue 39); every engine now gives it two."""
    # TensorFlow's coordinator (not Phalanx) segfaults now and then under CI load right after it
    # starts coordinating (the Slurm and boxed PS tests met it); a user meets that with
    # run.max_restarts, and so does this test: any restart must be that crash
    exp_id, _ = run_example("tensorflow-ps", "--param", "steps=150", folder=tmp_path, restarts=1)
    got = experiment(exp_id)
    assert got["status"] == "succeeded"  # although the worker and ps servers had to be stopped
    for attempt in got["attempts"][:-1]:
        assert "killed by SIGSEGV" in (attempt["reason"] or ""), got["attempts"]
    ran = phalanx_cli("get", exp_id, "--file").stdout  # the file it ran: one core for each of the 3 roles
    assert ran.count("limits: 1") == 3, ran
    assert final_accuracies(exp_id)["test"] >= 0.9


@pytest.mark.slow
def test_mxnet_parameter_server_trains_on_both_workers_on_one_core_each(home: Path, tmp_path: Path) -> None:
    exp_id, _ = run_example("mxnet-ps", "--param", "epochs=3", folder=tmp_path)
    assert experiment(exp_id)["status"] == "succeeded"
    accuracies = final_accuracies(exp_id)
    assert sorted(accuracies) == ["worker 0", "worker 1"]
    assert min(accuracies.values()) >= 0.9


def test_pytorch_over_mpirun_trains_without_horovod(home: Path) -> None:
    assert shutil.which("mpirun"), "Open MPI is missing: `make system-deps` installs openmpi-bin"
    exp_id, done = run_example("pytorch-mpi")
    assert experiment(exp_id)["status"] == "succeeded"
    assert final_accuracies(exp_id)["test"] >= 0.93
    assert "2 ranks over mpirun" in done.stdout + done.stderr


@pytest.mark.slow
@pytest.mark.timeout(2700)  # a fresh machine's first Horovod build: 4 min idle, up to 26 loaded
def test_horovod_example_trains_on_two_ranks_with_the_same_accuracy_and_per_rank_console(
    home: Path, tmp_path: Path
) -> None:
    """framework: horovod gets Horovod built once per machine (cached under ~/.cache/phalanx/wheels;
    the first run on a fresh machine builds it, 4+ minutes), then trains on 2 ranks over mpirun, each
    rank at one core (`one_core`)."""
    assert shutil.which("mpirun"), "Open MPI is missing: `make system-deps` installs openmpi-bin"
    exp_id, _ = phalanx_horovod(tmp_path)
    ran = phalanx_cli("get", exp_id, "--file").stdout
    assert ran.count("limits: 1") == 2, ran  # the master's and the worker's
    assert experiment(exp_id)["status"] == "succeeded"
    accuracies = final_accuracies(exp_id)
    assert sorted(accuracies) == ["rank 0", "rank 1"]
    assert accuracies["rank 0"] == accuracies["rank 1"] >= 0.9  # allreduce keeps the models identical
    logs = {}
    for replica in ("master", "worker-0"):
        got = phalanx_cli("logs", exp_id, "--replica", replica)
        assert got.returncode == 0, got.stderr
        logs[replica] = got.stdout
    # each rank's lines reach its own replica, tagged with its rank, one line each (never glued)
    assert "[rank 0] final test accuracy" in logs["master"] and "[rank 1]" not in logs["master"]
    assert "[rank 1] final test accuracy" in logs["worker-0"]
    for text in logs.values():
        assert all(line.count("final test accuracy") <= 1 for line in text.splitlines())
        assert "[rank 0] [rank 0]" not in text and "[rank 1] [rank 1]" not in text  # labelled once


def phalanx_horovod(folder: Path) -> tuple[str, subprocess.CompletedProcess[str]]:
    # the Horovod build may run first on a fresh machine: allow for it. 3 epochs score 0.964 (0.896
    # after the first), above the 0.9 asked; each epoch costs seconds on a loaded machine.
    file, workdir = one_core("horovod", folder), EXAMPLES / "horovod"
    done = phalanx("run", "-f", str(file), "--workdir", str(workdir), "--param", "epochs=3", timeout=2400)
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"phalanx run horovod exited {done.returncode}:\n{output[-6000:]}"
    rows = json.loads(phalanx_cli("ls", "-o", "json").stdout)
    rows = rows.get("items", rows) if isinstance(rows, dict) else rows
    return str(rows[0]["id"]), done
