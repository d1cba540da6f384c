"""The Slurm engine on a real two-node cluster: DDP across nodes, tracking, the gang rule, cancel."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
from tests.conftest import REPO
from tests.support.slurm import LocalSlurm

from phalanx.backends.base import LaunchContext
from phalanx.backends.slurm import SlurmBackend
from phalanx.clusters import add_cluster
from phalanx.config import Settings
from phalanx.domain import ExperimentStatus, Framework, Range, ReplicaState, Resources
from phalanx.plan import build_plan
from phalanx.spec.model import ExperimentSpec, ReplicaTemplate, Topology

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.timeout(240)]

HERE = Path(__file__).resolve().parent
PYTHON = sys.executable

EXPERIMENT = """\
version: 1
kind: experiment
framework: pytorch
environment:
  replicas:
    n_workers: 1
run:
  cmd: python -u ddp_train.py --epochs 3 {extra}
"""


def _file(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "polyaxonfile.yml"
    path.write_text(EXPERIMENT.format(extra=extra))
    (tmp_path / "ddp_train.py").write_text((HERE / "ddp_train.py").read_text())
    return path


def _wait(predicate, timeout: float = 120.0, what: str = "condition"):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def test_the_pytorch_ddp_example_runs_master_on_n1_and_worker_on_n2_and_its_metrics_reach_the_store(
    slurm_cluster: LocalSlurm, phalanx_home: Path
) -> None:
    from phalanx.runner import LaunchOptions, Runner
    from phalanx.spec.loader import load_spec
    from phalanx.store import open_store

    settings = Settings()
    add_cluster(slurm_cluster.cluster(), phalanx_home)
    store = open_store(settings)
    # one batch an epoch (a rank's shard of the digits is ~720 samples): every check below is about
    # where the ranks ran and what reached the store, none about what was learnt; the example's 32
    # a batch made 23 steps an epoch, each a gloo allreduce, 2-3 CPU-s more a rank
    params = {"epochs": 2, "batch_size": 1024}
    spec = load_spec(REPO / "examples" / "pytorch-ddp" / "polyaxonfile.yml", params=params)
    options = LaunchOptions(cluster=slurm_cluster.name)
    outcome = Runner(settings).run(spec, options, handle_signals=False, store=store)
    assert outcome.status is ExperimentStatus.SUCCEEDED, outcome.reason
    # SLURMD_NODENAME inside each task, as the task wrapper recorded it
    replicas = {r.name: r for r in store.list_replicas(outcome.experiment_id)}
    assert (replicas["master"].host, replicas["worker-0"].host) == ("n1", "n2")
    lines = [(line.replica, line.text) for line in store.logs(outcome.experiment_id)]
    assert any(r == "master" and t.startswith("test accuracy:") for r, t in lines), lines
    metrics = store.metrics(outcome.experiment_id)
    assert set(metrics["loss"]) == {"worker 00", "worker 01"}
    assert list(metrics["loss"]["worker 01"].steps) == [0, 1]
    assert slurm_cluster.wait_queue_empty() == []
    # the console is kept once, in the store: the job's log files on the shared disk are gone
    run_dir = slurm_cluster.dir / "shared" / "runs" / outcome.experiment_id
    assert run_dir.is_dir() and not (run_dir / "logs").exists()


def test_a_killed_task_fails_the_experiment_and_leaves_nothing_in_the_queue(
    slurm_cluster: LocalSlurm, phalanx_home: Path, tmp_path: Path
) -> None:
    from phalanx.runner import LaunchOptions, Runner
    from phalanx.spec.loader import load_spec
    from phalanx.store import open_store
    from phalanx.supervisor import Outcome

    settings = Settings()
    add_cluster(slurm_cluster.cluster(), phalanx_home)
    store = open_store(settings)
    launcher = Runner(settings)
    prepared = launcher.prepare(
        load_spec(_file(tmp_path, "--hold 600")), LaunchOptions(cluster=slurm_cluster.name)
    )
    result: dict[str, Outcome] = {}
    runner = threading.Thread(
        target=lambda: result.setdefault(
            "outcome", launcher.run(prepared, LaunchOptions(), handle_signals=False, store=store)
        )
    )
    runner.start()
    log = slurm_cluster.dir / "shared" / "runs" / prepared.experiment_id / "logs" / "worker-0.log"
    text = _wait(lambda: log.exists() and "ready pid=" in log.read_text() and log.read_text(), what="worker")
    pid = int(text.split("ready pid=")[1].split()[0])
    # each replica's own environment says where Slurm put it: the master on n1, the worker on n2
    assert "replica=worker-0 node=n2" in text
    master_log = log.with_name("master.log")
    _wait(lambda: master_log.exists() and "replica=master node=n1" in master_log.read_text(), what="master")
    os.kill(pid, signal.SIGKILL)  # the worker dies as a node's OOM killer would kill it
    runner.join(timeout=120)
    assert not runner.is_alive()
    outcome = result["outcome"]
    assert outcome.status is ExperimentStatus.FAILED
    assert outcome.reason and outcome.reason.startswith("worker-0 was killed by signal 9"), outcome.reason
    states = {r.name: r.state for r in store.list_replicas(outcome.experiment_id)}
    assert states == {"master": ReplicaState.STOPPED, "worker-0": ReplicaState.FAILED}
    assert slurm_cluster.wait_queue_empty() == []


def test_replicas_with_different_resources_run_as_a_heterogeneous_job(
    slurm_cluster: LocalSlurm, phalanx_home: Path, tmp_path: Path
) -> None:
    (tmp_path / "ddp_train.py").write_text((HERE / "ddp_train.py").read_text())
    spec = ExperimentSpec(
        version=1,
        kind="experiment",
        command=(f"{PYTHON} -u ddp_train.py --epochs 1 --no-track",),
        framework=Framework.PYTORCH,
        master=ReplicaTemplate(resources=Resources(memory=Range(100, 100))),
        topology=Topology(
            n_workers=1, worker={0: ReplicaTemplate(resources=Resources(memory=Range(300, 300)))}
        ),
    )
    backend = SlurmBackend(slurm_cluster.cluster(), Settings())
    context = LaunchContext(
        "abcabcabc001",
        str(tmp_path),
        PYTHON,
        {"PHALANX_SPOOL": str(tmp_path / "spool"), "PHALANX_HOME": str(phalanx_home)},
    )
    dry = backend.dry_run(build_plan(spec), context)
    assert "#SBATCH hetjob" in dry.native
    assert "--mem-per-cpu=300" in dry.native
    handle = backend.submit(dry)
    status = _wait(lambda: (s := backend.describe(handle)) and s.status.done and s, what="the job to end")
    consoles = {name: list(backend.logs(handle, name)) for name in ("master", "worker-0")}
    assert status.status is ExperimentStatus.SUCCEEDED, (status, consoles)
    assert {r.name: r.host for r in status.replicas} == {"master": "n1", "worker-0": "n2"}
    assert any("world=2 done" in line for line in consoles["worker-0"])


def test_cancel_stops_the_job_and_is_idempotent(
    slurm_cluster: LocalSlurm, phalanx_home: Path, tmp_path: Path
) -> None:
    spec = ExperimentSpec(version=1, kind="experiment", command=("sleep 600",))
    backend = SlurmBackend(slurm_cluster.cluster(), Settings())
    context = LaunchContext("abcabcabc002", str(tmp_path), PYTHON, {})
    handle = backend.submit(backend.dry_run(build_plan(spec), context))
    _wait(lambda: (s := backend.describe(handle)) and s.status is ExperimentStatus.RUNNING, what="running")
    backend.cancel(handle)
    backend.cancel(handle)
    status = _wait(lambda: (s := backend.describe(handle)) and s.status.done and s, what="the job to stop")
    assert status.status is ExperimentStatus.STOPPED
    assert [r.state for r in status.replicas] == [ReplicaState.STOPPED]
    assert slurm_cluster.wait_queue_empty() == []


def test_a_restart_runs_the_group_again_with_a_clean_slate(
    slurm_cluster: LocalSlurm, phalanx_home: Path, tmp_path: Path
) -> None:
    from phalanx.runner import LaunchOptions, Runner
    from phalanx.store import open_store

    settings = Settings()
    add_cluster(slurm_cluster.cluster(), phalanx_home)
    first_fails = "if [ -f attempted ]; then echo second attempt; else touch attempted; exit 3; fi"
    spec = ExperimentSpec(version=1, kind="experiment", command=(first_fails,), max_restarts=1)
    options = LaunchOptions(cluster=slurm_cluster.name, workdir=tmp_path)
    outcome = Runner(settings).run(spec, options, handle_signals=False, store=open_store(settings))
    assert (outcome.status, outcome.restarts) == (ExperimentStatus.SUCCEEDED, 1), outcome.reason
    attempts = slurm_cluster.dir / "shared" / "runs" / outcome.experiment_id / "attempts"
    assert (attempts / "0" / "state" / "master.exit").read_text().strip() == "3"
    assert not list(attempts.glob("*/logs")) and not (attempts.parent / "logs").exists()  # in the store


def test_inside_a_slurm_job_each_replica_is_sampled_into_system_series(
    slurm_cluster: LocalSlurm, phalanx_home: Path, tmp_path: Path
) -> None:
    import json

    busy = f"{PYTHON} -c 'import time; end = time.time() + 4\nwhile time.time() < end: pass'"
    spec = ExperimentSpec(
        version=1,
        kind="experiment",
        command=(busy,),
        framework=Framework.PYTORCH,
        topology=Topology(n_workers=1),
        env={"PHALANX_SYSTEM_METRICS": "1"},
    )
    backend = SlurmBackend(slurm_cluster.cluster(), Settings())
    spool = tmp_path / "spool"
    context = LaunchContext(
        "abcabcabc009",
        str(tmp_path),
        PYTHON,
        {"PHALANX_SPOOL": str(spool), "PHALANX_HOME": str(phalanx_home)},
    )
    handle = backend.submit(backend.dry_run(build_plan(spec), context))
    status = _wait(lambda: (s := backend.describe(handle)) and s.status.done and s, what="the job to end")
    assert status.status is ExperimentStatus.SUCCEEDED, status
    sampled: dict[str, set[str]] = {}
    for path in spool.glob("*.spool"):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if record["kind"] == "scalar":
                for title, series in record["data"]["keys"]:
                    sampled.setdefault(title, set()).add(series)
    assert sampled.get("system/cpu_percent") == {"master", "worker-0"}, sampled
    assert sampled.get("system/rss_mib") == {"master", "worker-0"}, sampled


def test_a_restarted_slurm_group_continues_from_the_latest_checkpoint(
    slurm_cluster: LocalSlurm, phalanx_home: Path, tmp_path: Path
) -> None:
    """The restart-from-checkpoint test of the local engine (tests/integration/local/test_resume.py)
    with the replicas on the two Slurm nodes: the worker is SIGKILLed in epoch 3, max_restarts 1."""
    from tests.integration.local.test_resume import EPOCHS, TRAIN

    from phalanx.runner import LaunchOptions, Runner
    from phalanx.spec.loader import load_spec_text
    from phalanx.store import open_store

    settings = Settings()
    add_cluster(slurm_cluster.cluster(), phalanx_home)
    (tmp_path / "train.py").write_text(TRAIN)
    spec = load_spec_text(
        "version: 1\nkind: experiment\nframework: pytorch\nenvironment:\n  replicas:\n    n_workers: 1\n"
        f"run:\n  cmd: {PYTHON} train.py {tmp_path / 'marks'}\n  max_restarts: 1\n"
    )
    store = open_store(settings)
    options = LaunchOptions(cluster=slurm_cluster.name, workdir=tmp_path)
    outcome = Runner(settings).run(spec, options, handle_signals=False, store=store)
    assert (outcome.status, outcome.restarts) == (ExperimentStatus.SUCCEEDED, 1), outcome.reason
    loss = store.metrics(outcome.experiment_id, "loss")["loss"]
    expected = [10.0 * 0.5 ** (e + 1) for e in range(EPOCHS)]
    for replica in ("master", "worker-0"):
        assert loss[replica].steps == list(range(EPOCHS)), (replica, loss[replica].steps)
        assert loss[replica].values == expected
    lines = [line.text for line in store.logs(outcome.experiment_id)]
    assert lines.count("rank 1 starts at epoch 0") == 1 and lines.count("rank 1 starts at epoch 3") == 1


def test_no_system_metrics_reaches_the_slurm_job(
    slurm_cluster: LocalSlurm, phalanx_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from phalanx.runner import LaunchOptions, Runner

    monkeypatch.setenv("PHALANX_SYSTEM_METRICS", "off")  # what `phalanx run --no-system-metrics` sets
    add_cluster(slurm_cluster.cluster(), phalanx_home)
    spec = ExperimentSpec(version=1, kind="experiment", command=("echo hi",))
    prepared = Runner().dry_run(spec, LaunchOptions(cluster=slurm_cluster.name, workdir=tmp_path))
    assert "export PHALANX_SYSTEM_METRICS=off" in prepared.dry_run.render()
