"""A flush re-entered on the thread that is flushing: SIGTERM's handler (tracking.lifecycle) flushes
and then ends the process, and it may run while the main thread is inside ``flush()``. The points
that flush had taken lived only in its locals: the handler's flush did not see them, and the
process ended without them. Now everything a drain has taken is on the reporter, so the inner
flush writes it; and when the handler returns instead, the outer flush writes nothing twice.

The handler is simulated in-process: a hook at one step of the outer flush (encoding the points,
handing records to the spool writer, encoding them inside it) runs a nested flush, then either
raises (the process ended there) or returns."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from phalanx import spool
from phalanx.tracking import client
from phalanx.tracking.client import Reporter
from phalanx.tracking.identity import Identity


class Ended(BaseException):
    """The process ending inside the handler (SIGTERM's default action after the flush)."""


# where in the outer flush the handler runs: (object, attribute) whose first call it precedes
STEPS = {
    "encoding points": (client, "encode_points"),
    "handing records to the writer": (spool.SpoolWriter, "append"),
    "inside the writer's write": (spool, "encode"),
}


@pytest.fixture
def reporter(tmp_path: Path) -> Iterator[Reporter]:
    ident = Identity("0123456789ab", "master", "master", 0, 0, tmp_path / "spool", None, None)
    made = Reporter(ident, interval=600.0)  # fewer than CHUNK points: no background drain runs
    try:
        yield made
    finally:
        made.close(wait=False)


def _handler_at(
    monkeypatch: pytest.MonkeyPatch, step: str, handler: Callable[[], None], ends: bool
) -> list[str]:
    """Run ``handler`` once, at the first call of ``step`` on the main thread (where a signal
    handler runs; a writer thread is never interrupted); then end (raise Ended) or go on."""
    owner, name = STEPS[step]
    real = getattr(owner, name)
    ran: list[str] = []

    def hooked(*args: Any, **kwargs: Any) -> Any:
        if not ran and threading.current_thread() is threading.main_thread():
            ran.append(step)
            handler()
            if ends:
                raise Ended
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, hooked)
    return ran


def _report(reporter: Reporter) -> set[tuple[str, int, int]]:
    """Three runs of points (two ranks: three records) and an event after them; the points as
    (title, rank, step)."""
    sent = set()
    for rank, steps in ((0, range(0, 50)), (1, range(0, 50)), (0, range(50, 100))):
        for step in steps:
            reporter.scalars.append(("loss", f"rank{rank}", step, float(step), 1.0, rank))
            sent.add((f"rank{rank}", rank, step))
    reporter.event("status", {"status": "succeeded"})
    return sent


def _in_spool(reporter: Reporter) -> tuple[list[tuple[str, int, int]], list[str], list[int]]:
    """Every point in the spool file (series, rank, step), with repeats; the kinds; the seqs."""
    records, _ = spool.read_records(reporter.writer.path, 0, 1 << 30)
    points = []
    for rec in records:
        if rec["kind"] == "scalar":
            keys, idx, steps, _, _ = spool.decode_points(rec["data"])
            for i, step in enumerate(steps):
                points.append((keys[idx[i] if idx else 0][1], rec["rank"], step))
    return points, [r["kind"] for r in records], [r["seq"] for r in records]


@pytest.mark.parametrize("step", STEPS)
def test_a_flush_ended_by_a_handler_that_flushed_loses_no_point(
    reporter: Reporter, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    sent = _report(reporter)
    ran = _handler_at(monkeypatch, step, lambda: reporter.flush(wait=False), ends=True)
    with pytest.raises(Ended):
        reporter.flush(wait=False)
    assert ran == [step]
    points, kinds, seqs = _in_spool(reporter)
    assert sorted(points) == sorted(sent), "the interrupted flush's points were lost"
    assert kinds == ["scalar", "scalar", "scalar", "status"]
    assert seqs == [0, 1, 2, 3]


@pytest.mark.parametrize("step", STEPS)
def test_a_flush_resumed_after_a_handler_that_flushed_writes_nothing_twice(
    reporter: Reporter, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    sent = _report(reporter)
    ran = _handler_at(monkeypatch, step, lambda: reporter.flush(wait=False), ends=False)
    assert reporter.flush(wait=False) is True
    assert ran == [step]
    points, kinds, seqs = _in_spool(reporter)
    assert sorted(points) == sorted(sent)  # each once
    assert kinds == ["scalar", "scalar", "scalar", "status"]
    assert seqs == [0, 1, 2, 3]
    assert reporter.pending == [] and not reporter.scalars and not reporter.events
    # what is reported later goes on from there
    reporter.scalars.append(("loss", "rank0", 100, 1.0, 1.0, 0))
    assert reporter.flush(wait=False) is True
    assert _in_spool(reporter)[2] == [0, 1, 2, 3, 4]
