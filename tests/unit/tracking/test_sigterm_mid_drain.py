"""SIGTERM while the reporter drains. The SDK's SIGTERM handler (tracking.lifecycle) flushes, records
the status 'stopped' and ends the process. When it interrupted the main thread inside a drain (its
own flush()), the flush it started did not see the points that drain had taken (only in its
locals), and the process ended without them: 33 of 40 real runs of a job flushing in a loop lost
points. The handler now leaves its work to the interrupted drain, which does it as it ends.

The signal is real (``signal.raise_signal``: the handler runs at once, on this thread, at a chosen
step of the drain), handled by the task's own handler; the handler that was installed before it
raises ``Ended`` where the process would end (SIG_DFL)."""

from __future__ import annotations

import atexit
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from phalanx import spool
from phalanx.tracking import client
from phalanx.tracking.client import Reporter
from phalanx.tracking.identity import Identity
from phalanx.tracking.task import Task


class Ended(BaseException):
    """The process ending where SIGTERM's default action would end it."""


@pytest.fixture
def task(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Task]:
    """A main script's task (no ingester, no console capture) whose SIGTERM handler is installed;
    the handler before it ends the 'process' by raising Ended."""

    def default_action(signum: int, frame: Any) -> None:
        raise Ended

    monkeypatch.setattr(sys, "excepthook", sys.excepthook)  # install() replaces it
    # no background drain but the ones a test wakes, from the writer thread's first wait on: set
    # after the Task is made, its first wait of 0.2 s drained on its own when a test took longer
    # (a loaded machine), and the main thread's flush found nothing left to be interrupted in
    monkeypatch.setattr(Reporter.__init__, "__kwdefaults__", {"interval": 600.0})
    before = signal.signal(signal.SIGTERM, default_action)
    ident = Identity("0123456789ab", "master", "master", 0, 0, tmp_path / "spool", None, None)
    made = Task(ident, owner=True, name="sigterm", project="tests")
    assert made._reporter.interval == 600.0
    made._lifecycle.install()
    try:
        yield made
    finally:
        signal.signal(signal.SIGTERM, before)
        atexit.unregister(made._lifecycle.finalize)
        made._reporter.close(wait=False)


def _sigterm_at(monkeypatch: pytest.MonkeyPatch, owner: object, name: str) -> list[str]:
    """SIGTERM at the first call of ``owner.name`` on the main thread (where Python runs signal
    handlers; the writer thread is never interrupted)."""
    real = getattr(owner, name)
    sent: list[str] = []

    def hooked(*args: Any, **kwargs: Any) -> Any:
        if not sent and threading.current_thread() is threading.main_thread():
            sent.append(name)
            signal.raise_signal(signal.SIGTERM)
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, hooked)
    return sent


def _report(reporter: Reporter) -> set[tuple[str, int, int]]:
    """Three runs of points (two ranks: three records) and a text after them; the points as
    (series, rank, step)."""
    sent = set()
    for rank, steps in ((0, range(0, 50)), (1, range(0, 50)), (0, range(50, 100))):
        for step in steps:
            reporter.scalars.append(("loss", f"rank{rank}", step, float(step), 1.0, rank))
            sent.add((f"rank{rank}", rank, step))
    reporter.event("text", {"title": "text", "text": "after the points", "level": 20, "step": None})
    return sent


def _in_spool(reporter: Reporter) -> tuple[list[tuple[str, int, int]], list[dict[str, Any]]]:
    """Every point in the spool (series, rank, step), repeats included; every record."""
    records, _ = spool.read_records(reporter.writer.path, 0, 1 << 30)
    points = []
    for rec in records:
        if rec["kind"] == "scalar":
            keys, idx, steps, _, _ = spool.decode_points(rec["data"])
            for i, step in enumerate(steps):
                points.append((keys[idx[i] if idx else 0][1], rec["rank"], step))
    return points, records


def _assert_all_there_once_and_stopped(reporter: Reporter, sent: set[tuple[str, int, int]]) -> None:
    points, records = _in_spool(reporter)
    assert sorted(points) == sorted(sent), "points reported before the SIGTERM are missing (or twice)"
    assert [r["seq"] for r in records] == list(range(len(records)))  # each record once
    kinds = [r["kind"] for r in records]
    assert kinds.count("text") == 1
    assert kinds.count("status") == 1 and kinds[-1] == "status"
    assert records[-1]["data"] == {"status": "stopped", "reason": "terminated (SIGTERM)", "exit_code": 1}


# where in the main thread's flush the SIGTERM lands: (object, attribute) whose first call it precedes
STEPS: dict[str, tuple[object, str]] = {
    "encoding the points it took": (client, "encode_columns"),
    "screening the events it took": (client, "screen_event"),
    "handing the records to the spool writer": (spool.SpoolWriter, "append"),
    "inside the spool writer (records numbered)": (spool, "encode"),
    "making them durable": (spool.SpoolWriter, "sync"),
}


@pytest.mark.parametrize("step", STEPS)
def test_sigterm_in_the_middle_of_a_flush_loses_nothing_and_ends_the_process(
    task: Task, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    reporter = task._reporter
    sent = _report(reporter)
    fired = _sigterm_at(monkeypatch, *STEPS[step])
    with pytest.raises(Ended):  # the process ends as SIGTERM ends it, once the drain has ended
        task.flush(wait_for_uploads=False)
    assert fired
    _assert_all_there_once_and_stopped(reporter, sent)


class _WatchedLock:
    """A lock that says when ``thread`` starts to wait for it (sets ``waits``)."""

    def __init__(self, lock: Any, thread: threading.Thread, waits: threading.Event) -> None:
        self._lock, self._thread, self._waits = lock, thread, waits

    def __enter__(self) -> None:
        if threading.current_thread() is self._thread:
            self._waits.set()
        self._lock.__enter__()

    def __exit__(self, *exc: object) -> None:
        self._lock.__exit__(*exc)


def _writer_thread_held_in_its_write(
    monkeypatch: pytest.MonkeyPatch, reporter: Reporter
) -> tuple[threading.Event, threading.Event, threading.Event]:
    """(entered, release, main_waits): the writer thread's first write waits for ``release`` (it
    holds the drain lock and the points it took); ``main_waits``: the main thread waits for the lock."""
    entered, release, main_waits = threading.Event(), threading.Event(), threading.Event()
    real_append = spool.SpoolWriter.append

    def append(writer: spool.SpoolWriter, records: list[dict[str, Any]]) -> int:
        writer_thread = threading.current_thread() is reporter._thread
        if writer is reporter.writer and writer_thread and not entered.is_set():
            entered.set()
            assert release.wait(120)
        return real_append(writer, records)

    monkeypatch.setattr(spool.SpoolWriter, "append", append)
    main = threading.main_thread()
    reporter._drain_lock = _WatchedLock(reporter._drain_lock, main, main_waits)  # type: ignore[assignment]
    return entered, release, main_waits


def _when(event: threading.Event, then: Callable[[], None]) -> threading.Thread:
    def run() -> None:
        if event.wait(120):
            then()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_sigterm_while_the_writer_thread_drains_loses_nothing_and_does_not_deadlock(
    task: Task, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer thread holds the drain lock, with points taken, when SIGTERM lands on the main
    thread (not in a drain): the handler's flush waits for that drain, then writes the rest."""
    reporter = task._reporter
    entered, release, main_waits = _writer_thread_held_in_its_write(monkeypatch, reporter)
    sent = _report(reporter)
    reporter.wake()
    assert entered.wait(60)  # the writer thread is inside its write, holding what it took
    more = {("rank0", 0, step) for step in range(100, 120)}
    for _, _, step in sorted(more):
        reporter.scalars.append(("loss", "rank0", step, float(step), 1.0, 0))
    helper = _when(main_waits, release.set)  # once the handler's flush waits for the lock
    with pytest.raises(Ended):
        signal.raise_signal(signal.SIGTERM)
    helper.join(60)
    _assert_all_there_once_and_stopped(reporter, sent | more)


def test_sigterm_while_a_flush_waits_for_the_writer_threads_drain_loses_nothing(
    task: Task, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The main thread's flush waits for the drain lock the writer thread holds when SIGTERM lands:
    the flush ends its drain first (after the writer thread's), then the process ends."""
    reporter = task._reporter
    entered, release, main_waits = _writer_thread_held_in_its_write(monkeypatch, reporter)
    sent = _report(reporter)
    reporter.wake()
    assert entered.wait(60)
    more = {("rank1", 1, step) for step in range(100, 120)}
    for _, _, step in sorted(more):
        reporter.scalars.append(("loss", "rank1", step, float(step), 1.0, 1))

    def sigterm_then_release() -> None:
        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGTERM)
        release.set()

    helper = _when(main_waits, sigterm_then_release)
    with pytest.raises(Ended):
        task.flush(wait_for_uploads=False)
    helper.join(60)
    _assert_all_there_once_and_stopped(reporter, sent | more)


@pytest.mark.timeout(60)  # without the fix this deadlocks
def test_sigterm_while_a_flush_holds_the_spool_writers_lock_the_writer_thread_wants_does_not_deadlock(
    task: Task, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The main thread's flush is making its records durable (holding the spool writer's lock) while
    the writer thread, in the middle of its drain (holding the drain lock), waits for that lock, when
    SIGTERM lands: a handler that flushed right there waited for the drain lock for good."""
    reporter = task._reporter
    sent = _report(reporter)
    writer_waits = threading.Event()
    writer = reporter.writer
    writer._lock = _WatchedLock(writer._lock, reporter._thread, writer_waits)  # type: ignore[assignment]
    more = {("rank1", 1, step) for step in range(100, 120)}
    real_fsync = spool.os.fsync
    fired: list[int] = []

    def fsync(fd: int) -> None:
        if not fired and threading.current_thread() is threading.main_thread():
            fired.append(fd)
            for _, _, step in sorted(more):
                reporter.scalars.append(("loss", "rank1", step, float(step), 1.0, 1))
            reporter.wake()
            assert writer_waits.wait(30)  # the writer thread took them and waits for our lock
            signal.raise_signal(signal.SIGTERM)
        real_fsync(fd)

    monkeypatch.setattr(spool.os, "fsync", fsync)
    with pytest.raises(Ended):
        task.flush(wait_for_uploads=False)
    assert fired
    _assert_all_there_once_and_stopped(reporter, sent | more)


class _SigtermInside:
    """A lock that, the first time the main thread holds it, gets SIGTERM there."""

    def __init__(self, lock: Any) -> None:
        self._lock, self.fired = lock, False

    def __enter__(self) -> None:
        self._lock.__enter__()
        if not self.fired and threading.current_thread() is threading.main_thread():
            self.fired = True
            try:
                signal.raise_signal(signal.SIGTERM)
            except BaseException:  # Ended (or the timeout): the `with` is not entered, nothing releases it
                self._lock.__exit__(None, None, None)
                raise

    def __exit__(self, *exc: object) -> None:
        self._lock.__exit__(*exc)


@pytest.mark.timeout(60)  # without the fix this deadlocks
def test_sigterm_while_a_flush_counts_its_problems_does_not_deadlock(
    task: Task, monkeypatch: pytest.MonkeyPatch
) -> None:
    """flush() takes the problems of its items under a lock that is not re-entrant: a handler that
    flushed while the main thread held it waited for it for good."""
    reporter = task._reporter
    sent = _report(reporter)
    held = _SigtermInside(reporter.problems._lock)
    reporter.problems._lock = held  # type: ignore[assignment]
    with pytest.raises(Ended):
        task.flush(wait_for_uploads=False)
    assert held.fired
    _assert_all_there_once_and_stopped(reporter, sent)


def test_a_flush_while_the_writer_thread_drains_console_lines_answers_true(
    task: Task, monkeypatch: pytest.MonkeyPatch
) -> None:
    """flush() waits for the writer thread's drain (console lines here) and answers True: a re-entrant
    drain once answered False whenever the writer thread was writing."""
    reporter = task._reporter
    entered, release, main_waits = _writer_thread_held_in_its_write(monkeypatch, reporter)
    reporter.event("log", {"stream": "stdout", "lines": ["epoch 1"]})
    reporter.wake()
    assert entered.wait(60)
    reporter.event("log", {"stream": "stdout", "lines": ["epoch 2"]})
    reporter.scalars.append(("loss", "master", 0, 1.0, 1.0, 0))
    helper = _when(main_waits, release.set)
    assert task.flush(wait_for_uploads=False) is True
    helper.join(60)
    assert task.flush_problems == []
    points, records = _in_spool(reporter)
    assert [r["data"]["lines"] for r in records if r["kind"] == "log"] == [["epoch 1"], ["epoch 2"]]
    assert points == [("master", 0, 0)]


def test_a_name_that_cannot_be_encoded_is_left_out_alone_and_stops_no_later_write(
    task: Task, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A title that is a list made the whole drain fail (flush() raised TypeError, the points beside it
    were lost, and the final status with them when it was in that drain)."""
    reporter = task._reporter
    logger = task.get_logger()
    for step in range(3):
        logger.report_scalar("loss", "master", float(step), step)
    logger.report_scalar(["loss"], "master", 1.0, 3)  # type: ignore[arg-type]
    logger.report_scalar("loss", "master", 4.0, 4)
    assert task.flush(wait_for_uploads=False) is False
    assert task.flush_problems == ["metric \"['loss']\"/'master': a name must be a string, not a list"]
    # and again in the drain that SIGTERM interrupts: the rest and the final status are written
    logger.report_scalar("loss", "master", 5.0, 5)
    logger.report_scalar("loss", ["master"], 1.0, 6)  # type: ignore[arg-type]
    logger.report_scalar("loss", "master", 7.0, 7)
    fired = _sigterm_at(monkeypatch, client, "encode_points")
    with pytest.raises(Ended):
        task.flush(wait_for_uploads=False)
    assert fired
    points, records = _in_spool(reporter)
    assert points == [("master", 0, step) for step in (0, 1, 2, 4, 5, 7)]
    assert [r["kind"] for r in records] == ["scalar", "scalar", "status"]
    assert records[-1]["data"]["status"] == "stopped"
