"""Attempts: `phalanx resume` reopening the experiment (one winner), the attempts' numbers in the
store (a restart, the engine's own requeue), the checkpoint a new group continues from, and the
record of what each attempt runs, written once the store is ready."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from phalanx import repro
from phalanx.backends.base import JobStatus
from phalanx.checkpoints import ENV_RESUME, ENV_RESUME_STEP
from phalanx.config import Settings
from phalanx.domain import ExperimentStatus
from phalanx.errors import Conflict
from phalanx.machine.procs import recorded_process
from phalanx.spec.model import ExperimentSpec, Topology
from phalanx.spool import SpoolWriter
from phalanx.store.sql import SqlStore
from phalanx.supervisor.attempts import Attempts
from phalanx.supervisor.console import Console
from phalanx.supervisor.opener import LazyStore
from phalanx.supervisor.outcome import PID_FILE
from phalanx.supervisor.preparing import Prepared, prepare
from phalanx.supervisor.recording import create_experiment, replicas_of
from phalanx.supervisor.stopping import write_stop_request
from tests.unit.supervisor.fakes import FakeObserver, spooled


@pytest.fixture
def prepared(settings: Settings, tmp_path: Path, store: SqlStore) -> Prepared:
    spec = ExperimentSpec(
        version=1, kind="experiment", command=("python train.py",), topology=Topology(n_workers=1)
    )
    p = prepare(spec, settings=settings, workdir=tmp_path, experiment_id="e1", dry=True)
    create_experiment(store, p)
    return p


@pytest.fixture
def spool(settings: Settings) -> Iterator[SpoolWriter]:
    writer = SpoolWriter(settings.spool_dir / "e1", experiment_id="e1", stream="console-e1")
    yield writer
    writer.close()


def attempts_of(
    prepared: Prepared, store: SqlStore, settings: Settings, observer: FakeObserver, spool: SpoolWriter
) -> Attempts:
    console = Console(spool, observer, replicas_of(prepared))
    return Attempts(
        "e1",
        LazyStore(store),
        prepared.backend,
        console,
        observer,
        run_dir=settings.runs_dir / "e1",
        spool_dir=settings.spool_dir / "e1",
        cache=settings.home / "cache",
    )


def recorded(store: SqlStore) -> list[tuple[int, str, str | None, str | None]]:
    return [(a["number"], a["kind"], a["status"], a["reason"]) for a in store.attempts("e1")]


def test_attempts_are_numbered_and_finished_in_the_store(
    prepared: Prepared, store: SqlStore, settings: Settings, observer: FakeObserver, spool: SpoolWriter
) -> None:
    attempts = attempts_of(prepared, store, settings, observer, spool)
    assert attempts.add("start") == 0 and attempts.number == 0
    attempts.finish(0, ExperimentStatus.FAILED, "worker-0 exited with code 3")
    assert attempts.add("restart") == 1
    attempts.finish(None, ExperimentStatus.FAILED, "no attempt recorded: nothing to finish")
    assert recorded(store) == [
        (0, "start", "failed", "worker-0 exited with code 3"),
        (1, "restart", "running", None),
    ]


def test_an_engines_requeue_starts_a_new_attempt_said_in_every_console(
    prepared: Prepared, store: SqlStore, settings: Settings, observer: FakeObserver, spool: SpoolWriter
) -> None:
    attempts = attempts_of(prepared, store, settings, observer, spool)
    attempts.add("start")
    attempts.follow_requeue(JobStatus(ExperimentStatus.RUNNING, attempt=0))  # the same attempt
    assert attempts.number == 0
    attempts.follow_requeue(JobStatus(ExperimentStatus.PENDING, attempt=1))  # Slurm started it again
    assert attempts.number == 1
    assert recorded(store) == [(0, "start", "failed", "requeued by local"), (1, "requeue", "running", None)]
    assert observer.messages == ["requeued by local; attempt 1 starts"]
    notes = {(r["replica"], r["data"]["lines"][0]) for r in spooled(spool.spool_dir, "log")}
    assert notes == {(n, "phalanx: requeued by local; attempt 1 starts") for n in ("master", "worker-0")}


def test_a_new_group_continues_from_the_latest_checkpoint_the_last_one_spooled(
    prepared: Prepared, store: SqlStore, settings: Settings, observer: FakeObserver, spool: SpoolWriter
) -> None:
    attempts = attempts_of(prepared, store, settings, observer, spool)
    attempts.add("start")
    assert store.artifact_store is not None
    for step in (1, 3):  # what the failed group's task.save_checkpoint left: files, and the spool's records
        path = f"checkpoints/master/step-{step:09d}.pkl"
        store.artifact_store.put_bytes("e1", path, b"weights")
        meta = {"step": step, "metrics": {"loss": 1.0 / step}}
        data = {"name": f"checkpoint-{step}", "kind": "checkpoint", "path": path, "size": 7, "metadata": meta}
        spool.write("artifact", data, replica="master")
    context = attempts.resume_context(prepared.context)
    env = context.tracking_env
    assert env[ENV_RESUME_STEP] == "3" and env["PHALANX_RESUME_METRICS"] == '{"loss": 0.3333333333333333}'
    assert Path(env[ENV_RESUME]).read_bytes() == b"weights"
    assert env["PHALANX_ATTEMPT"] == "1"  # the next group's points replace the first attempt's steps
    assert attempts.resume_step == 3
    attempts.add("restart")
    assert store.attempts("e1")[-1]["checkpoint_step"] == 3
    assert ("master", "phalanx: continuing from checkpoint step 3 (checkpoint-3)") in observer.lines


def test_without_a_checkpoint_a_new_group_starts_from_scratch(
    prepared: Prepared, store: SqlStore, settings: Settings, observer: FakeObserver, spool: SpoolWriter
) -> None:
    attempts = attempts_of(prepared, store, settings, observer, spool)
    context = attempts.resume_context(prepared.context)
    assert ENV_RESUME not in context.tracking_env and context.tracking_env["PHALANX_ATTEMPT"] == "0"
    assert attempts.resume_step is None


def test_a_resume_reopens_a_failed_experiment_and_records_its_supervisor(
    prepared: Prepared, store: SqlStore, settings: Settings, observer: FakeObserver, spool: SpoolWriter
) -> None:
    store.update_experiment("e1", status=ExperimentStatus.FAILED, reason="worker-0 was killed")
    write_stop_request(settings, "e1")  # the stop that ended the last attempt
    attempts_of(prepared, store, settings, observer, spool).reopen()
    assert store.get_experiment("e1").status is not ExperimentStatus.FAILED
    assert recorded_process(settings.runs_dir / "e1" / PID_FILE) == os.getpid()
    assert not (settings.runs_dir / "e1" / "stop").exists()  # spent: this is a new attempt


def test_a_resume_that_lost_the_race_leaves_the_winners_pid_file(
    prepared: Prepared, store: SqlStore, settings: Settings, observer: FakeObserver, spool: SpoolWriter
) -> None:
    pid_file = settings.runs_dir / "e1" / PID_FILE
    pid_file.parent.mkdir(parents=True)
    pid_file.write_text("12345 67 otherhost\n")  # the winner's
    with pytest.raises(Conflict, match="only a failed or stopped one can be resumed"):
        attempts_of(prepared, store, settings, observer, spool).reopen()  # it is starting: reopened already
    assert pid_file.read_text() == "12345 67 otherhost\n"


def test_what_runs_is_recorded_once_the_store_is_ready(
    prepared: Prepared,
    store: SqlStore,
    settings: Settings,
    observer: FakeObserver,
    spool: SpoolWriter,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    collected = threading.Event()

    def collect(
        *,
        workdir: str,
        python: str,
        launch: Any,
        box: Any,
        cache: Path | None,
        since_ns: int | None,
        own_output: frozenset[tuple[int, int]],
    ) -> tuple[dict[str, Any], bytes]:
        assert box == []  # not boxed: git and pip run as the supervisor
        assert cache == settings.home / "cache"  # the package list is kept per environment
        assert since_ns is not None and since_ns <= time.time_ns()  # what changes after is output
        collected.set()
        return {"git": None, "launch": dict(launch), "snapshot": {"files": 1}}, b"tarball"

    monkeypatch.setattr(repro, "collect", collect)  # git and pip are asked in processes
    attempts = attempts_of(prepared, store, settings, observer, spool)
    attempts.start_repro(prepared, attempt=2)
    assert collected.wait(timeout=30)
    attempts.store()  # the supervisor opens the store (after the first group started) ...
    assert store.repro("e1") == {}  # ... but the row may not be complete yet: it waits
    attempts.store.ready()
    attempts.join_repro()
    record = store.repro("e1")
    assert record["snapshot"] == {"files": 1, "path": "_source/attempt-2/source.tar.gz"}
    assert record["attempt"] == 2 and [a["attempt"] for a in record["attempts"]] == [2]
    assert record["launch"]["workdir"] == prepared.context.workdir
    assert store.artifact_store is not None
    assert store.artifact_store.read_bytes("e1", "_source/attempt-2/source.tar.gz") == b"tarball"


def test_nothing_is_recorded_when_the_store_never_opened(
    prepared: Prepared,
    store: SqlStore,
    settings: Settings,
    observer: FakeObserver,
    spool: SpoolWriter,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(repro, "collect", lambda **kw: ({"git": None, "snapshot": {}}, b""))
    attempts = attempts_of(prepared, store, settings, observer, spool)
    attempts.start_repro(prepared)
    attempts.join_repro()  # the supervisor failed before it opened the store: the thread just ends
    assert attempts._repro is not None and not attempts._repro.is_alive()
    assert store.repro("e1") == {}
