"""The report path never waits on I/O, the SDK imports only the standard library, and several
processes reporting at once lose nothing."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from tests.support.sandbox import Sandbox
from tests.support.spooled import scalar_points

from phalanx import spool
from phalanx.tracking.identity import Identity
from phalanx.tracking.task import Task

SRC = Path(__file__).resolve().parents[3] / "src"


def test_report_calls_return_while_the_spool_write_is_stuck(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()
    entered = threading.Event()
    real_write = spool._write_all

    def stuck_write(fd: int, data: bytes) -> None:
        entered.set()
        release.wait(120)  # a disk that hangs
        real_write(fd, data)

    monkeypatch.setattr(spool, "_write_all", stuck_write)
    ident = Identity("0123456789ab", "master", "master", 0, 0, tmp_path / "spool", None, None)
    task = Task(ident, owner=False, name=None, project=None)  # no process hooks: a bare task
    logger = task.get_logger()
    logger.report_scalar("loss", "master", 0.0, 0)
    task._reporter.wake()
    assert entered.wait(60)  # the writer thread is now blocked inside the write
    for i in range(1, 50_000):
        logger.report_scalar("loss", "master", float(i), i)  # would hang here if a call did I/O
    task.connect({"a": 1})
    release.set()
    task.flush(wait_for_uploads=False)
    records, _ = spool.read_records(task._reporter.writer.path, 0, 1 << 30)
    steps = [s for r in records if r["kind"] == "scalar" for s in spool.decode_points(r["data"])[2]]
    assert steps == list(range(50_000))
    task._reporter.close(wait=False)


def test_one_steps_values_reported_together_land_as_separate_titles_at_that_step(tmp_path: Path) -> None:
    """``report_scalars``: what a Trainer's per-step log becomes (one clock read for the batch)."""
    ident = Identity("0123456789ab", "master", "master", 0, 0, tmp_path / "spool", None, None)
    task = Task(ident, owner=False, name=None, project=None)
    logger = task.get_logger()
    logger.report_scalars("master", [("train/loss", 0.5), ("train/learning_rate", 1)], iteration=7)
    logger.report_scalars("master", iter([("train/loss", 0.25)]), iteration=8)
    task.flush(wait_for_uploads=False)
    points = scalar_points(task._reporter.writer.path)
    assert sorted(points) == [
        ("train/learning_rate", "master", 7, 1.0),
        ("train/loss", "master", 7, 0.5),
        ("train/loss", "master", 8, 0.25),
    ]
    task._reporter.close(wait=False)


def test_the_sdk_imports_only_the_standard_library(tmp_path: Path) -> None:
    code = """
import sys
from phalanx import Task, log_metrics
import phalanx.tracking, phalanx.spool
outside = sorted(
    name for name in sys.modules
    if name.split(".")[0] not in sys.stdlib_module_names and name.split(".")[0] not in ("phalanx", "__main__")
)
print(outside)
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PHALANX_", "PYTHON"))}
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", f"import sys; sys.path.insert(0, {str(SRC)!r})\n{code}"],
        capture_output=True, text=True, env=env, timeout=120, check=True,
    )  # fmt: skip
    assert done.stdout.strip() == "[]"


def test_a_task_works_without_any_third_party_package(sandbox: Sandbox) -> None:
    """-S: no site-packages at all (an MXNet venv with old numpy is no worse). The spool waits for the
    next ingest, here the test's."""
    path = sandbox.script(
        f"""
import sys
sys.path.insert(0, {str(SRC)!r})
from phalanx import Task
task = Task.init("examples", "bare")
task.get_logger().report_scalar("loss", "master", 0.25, 0)
task.upload_artifact("cfg", {{"x": 1}})
print("flushed into the store:", task.flush(timeout=5))
"""
    )
    done = subprocess.run(
        [sys.executable, "-S", str(path)], capture_output=True, text=True, env=sandbox.env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "flushed into the store: False" in done.stdout  # no ingester could start here
    store = sandbox.ingested()
    exp = sandbox.only_experiment(store)
    assert store.metrics(exp)["loss"]["master"].values == [0.25]
    assert [a.name for a in store.artifacts(exp)] == ["cfg"]
    assert str(store.get_experiment(exp).status) == "succeeded"


def test_four_processes_reporting_at_once_lose_nothing(sandbox: Sandbox) -> None:
    store = sandbox.store()
    exp = store.create_experiment(name="four", project="p").id
    sandbox.env.update(PHALANX_EXPERIMENT_ID=exp, PHALANX_SPOOL=str(sandbox.home / "spool" / exp))
    path = sandbox.script(
        """
import sys
from phalanx import Task
rank = int(sys.argv[1])
logger = Task.init().get_logger()
for i in range(50_000):
    logger.report_scalar("loss", f"worker {rank:02d}", i * 0.5, i)
Task.current_task().flush(wait_for_uploads=False)
"""
    )
    procs = [
        subprocess.Popen(
            [sys.executable, str(path), str(r)], env=sandbox.env, stderr=subprocess.PIPE, text=True
        )
        for r in range(4)
    ]
    stop = threading.Event()
    from phalanx.ingest import Ingester

    ingesting = threading.Thread(target=Ingester(store, None, sandbox.home / "spool").run, args=(stop, 0.05))
    ingesting.start()  # ingest while they write, as the supervisor does
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    stop.set()
    ingesting.join(120)
    metrics = store.metrics(exp)["loss"]
    for r in range(4):
        assert metrics[f"worker {r:02d}"].steps == list(range(50_000))
