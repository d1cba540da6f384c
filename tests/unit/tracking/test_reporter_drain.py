"""The reporter's background writer under a loop that reports faster than one drain writes: the
points go to the spool a few chunks at a time, one drain after the other, not all at once an
interval later (the ingester starts on the first chunks while the next are encoded, issue 42)."""

from __future__ import annotations

import errno
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from phalanx import spool
from phalanx.tracking.client import CHUNK, DRAIN_POINTS, Reporter
from phalanx.tracking.identity import Identity


def _points_in_spool(reporter: Reporter) -> list[int]:
    """The number of points of each scalar record written so far, in order."""
    records, _ = spool.read_records(reporter.writer.path, 0, 1 << 30)
    return [r["data"]["n"] for r in records if r["kind"] == "scalar"]


def first_write_held(
    monkeypatch: pytest.MonkeyPatch, spool_dir: Path
) -> tuple[threading.Event, threading.Event]:
    """The first spool write of a writer under ``spool_dir`` (this test's reporter: never the writer
    thread of an earlier test's, which may still be winding down) waits for ``release``;
    ``entered``: it is waiting."""
    release, entered = threading.Event(), threading.Event()
    real_append = spool.SpoolWriter.append

    def first_append_waits(writer: spool.SpoolWriter, records: list[dict[str, object]]) -> int:
        if writer.path.is_relative_to(spool_dir) and not entered.is_set():
            entered.set()
            release.wait(120)
        return real_append(writer, records)

    monkeypatch.setattr(spool.SpoolWriter, "append", first_append_waits)
    return release, entered


def test_while_chunks_are_waiting_the_writer_writes_them_without_waiting_an_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    release, entered = first_write_held(monkeypatch, tmp_path / "spool")
    ident = Identity("0123456789ab", "master", "master", 0, 0, tmp_path / "spool", None, None)
    reporter = Reporter(ident, interval=600.0)  # the next interval's drain would be 10 minutes away
    try:
        reporter.scalars.append(("loss", "master", 0, 0.0, 1.0, 0))
        reporter.wake()
        assert entered.wait(60)  # the writer is inside its first write
        reported = 3 * DRAIN_POINTS + CHUNK // 2
        for i in range(1, reported):
            reporter.scalars.append(("loss", "master", i, float(i), 1.0, 0))
        release.set()  # no further wake-up: the writer must see the full chunks on its own
        deadline = time.monotonic() + 120  # the bound is for a failing run; a passing one is at once
        while sum(_points_in_spool(reporter)) < reported - CHUNK and time.monotonic() < deadline:
            time.sleep(0.01)
        written = _points_in_spool(reporter)
        assert sum(written) >= reported - CHUNK, "full chunks waited for the next interval"
        assert max(written) <= CHUNK  # a record is one chunk, and a drain writes a few of them
        assert len(written) >= 1 + 3 * DRAIN_POINTS // CHUNK
    finally:
        release.set()
        reporter.close(wait=False)


def test_while_the_disk_is_full_everything_buffered_is_held_to_the_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fast loop while the spool's disk is full: one drain takes all that is buffered through the
    PHALANX_MAX_PENDING_POINTS bound (the points past it are dropped and counted), not DRAIN_POINTS
    an interval while the rest piles up in memory without a bound."""

    def disk_full(writer: spool.SpoolWriter, records: list[dict[str, object]]) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(spool.SpoolWriter, "append", disk_full)
    monkeypatch.setenv("PHALANX_MAX_PENDING_POINTS", "1000")
    ident = Identity("0123456789ab", "master", "master", 0, 0, tmp_path / "spool", None, None)
    reporter = Reporter(ident, interval=600.0)  # no drain but the ones this test wakes
    try:
        reporter.scalars.append(("loss", "master", 0, 0.0, 1.0, 0))
        reporter.wake()
        deadline = time.monotonic() + 60
        while reporter.disk_error is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert reporter.disk_error is not None
        reported = 3 * DRAIN_POINTS
        for i in range(1, reported + 1):
            reporter.scalars.append(("loss", "master", i, float(i), 1.0, 0))
        reporter.wake()  # one drain
        deadline = time.monotonic() + 10  # a passing run is at once; a failing one waits 600 s
        while reporter.scalars and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not reporter.scalars, "points past the bound stayed in memory"
        assert reporter._pending_points <= 1000
    finally:
        reporter.close(wait=False)


def test_an_event_is_written_after_the_scalars_reported_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A drain that writes DRAIN_POINTS of a longer backlog leaves an event reported after the
    backlog for a later drain: the status 'succeeded' a script queues at exit went into the spool
    before 80,000 of the points it reported, and a reader saw the run ended with them missing."""
    release, entered = first_write_held(monkeypatch, tmp_path / "spool")
    ident = Identity("0123456789ab", "master", "master", 0, 0, tmp_path / "spool", None, None)
    reporter = Reporter(ident, interval=600.0)
    try:
        reporter.scalars.append(("loss", "master", 0, 0.0, 1.0, 0))
        reporter.wake()
        assert entered.wait(60)  # the writer is inside its first write
        for i in range(1, 3 * DRAIN_POINTS + 1):
            reporter.scalars.append(("loss", "master", i, float(i), 1.0, 0))
        reporter.event("status", {"status": "succeeded"})
        release.set()  # the writer goes on through the backlog, DRAIN_POINTS a drain
        deadline = time.monotonic() + 60
        kinds: list[str] = []
        while "status" not in kinds and time.monotonic() < deadline:
            time.sleep(0.01)
            kinds = [r["kind"] for r in spool.read_records(reporter.writer.path, 0, 1 << 30)[0]]
        assert "status" in kinds
        assert kinds.index("status") == len(kinds) - 1, "the status went before points reported earlier"
        assert sum(_points_in_spool(reporter)) == 3 * DRAIN_POINTS + 1
    finally:
        release.set()
        reporter.close(wait=False)


def test_a_flush_writes_a_long_backlog_a_piece_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fast loop leaves most of its points to its flush (the writer thread shares the interpreter's
    lock with it): the flush writes them DRAIN_POINTS a spool write, so the ingester stores the first
    pieces while the next are encoded; written in one piece, none reached the store before the last
    was encoded (issue 42)."""
    spool_dir = tmp_path / "spool"
    points_per_write: list[int] = []
    real_append = spool.SpoolWriter.append

    def counted(writer: spool.SpoolWriter, records: list[dict[str, Any]]) -> int:
        if writer.path.is_relative_to(spool_dir):
            points_per_write.append(sum(r["data"]["n"] for r in records if r["kind"] == "scalar"))
        return real_append(writer, records)

    monkeypatch.setattr(spool.SpoolWriter, "append", counted)
    ident = Identity("0123456789ab", "master", "master", 0, 0, spool_dir, None, None)
    reporter = Reporter(ident, interval=600.0)
    try:
        reported = 3 * DRAIN_POINTS + CHUNK // 2
        for i in range(reported):
            reporter.scalars.append(("loss", "master", i, float(i), 1.0, 0))
        reporter.event("status", {"status": "succeeded"})
        assert reporter.flush(wait=False)
        assert sum(points_per_write) == reported and len(points_per_write) >= 4
        assert max(points_per_write) <= DRAIN_POINTS, "the backlog went to the spool in one piece"
        records = spool.read_records(reporter.writer.path, 0, 1 << 30)[0]
        assert records[-1]["kind"] == "status"  # after every point reported before it
        steps = [s for r in records[:-1] for s in spool.decode_points(r["data"])[2]]
        assert steps == list(range(reported))
    finally:
        reporter.close(wait=False)


def test_a_flush_on_a_full_disk_tries_its_backlog_once_not_a_piece_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once a piece finds the disk full, the rest of the backlog goes through the bound in one try:
    a try a piece encoded every kept record again each time (a stopping process's flush took twice
    as long as before pieces)."""
    tries: list[int] = []

    def full(writer: spool.SpoolWriter, records: list[dict[str, Any]]) -> int:
        tries.append(len(records))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(spool.SpoolWriter, "append", full)
    ident = Identity("0123456789ab", "master", "master", 0, 0, tmp_path / "spool", None, None)
    reporter = Reporter(ident, interval=600.0)
    try:
        for i in range(3 * DRAIN_POINTS):
            reporter.scalars.append(("loss", "master", i, float(i), 1.0, 0))
        assert reporter.flush(wait=False) is False
        assert len(tries) <= 2, tries
        assert reporter.disk_error and not reporter.scalars  # all of it kept (to the bound) or counted
        assert "No space left on device" in reporter.last_problems[0]  # task.flush_problems says why
    finally:
        reporter.close(wait=False)


def test_an_event_held_back_is_written_once_no_scalar_waits(tmp_path: Path) -> None:
    """An event's count of the scalars before it can be too large (a drain ran between the two
    reads of it); held for scalars that never come, a script's final status was never written."""
    ident = Identity("0123456789ab", "master", "master", 0, 0, tmp_path / "spool", None, None)
    reporter = Reporter(ident, interval=600.0)
    try:
        for i in range(5):
            reporter.scalars.append(("loss", "master", i, float(i), 1.0, 0))
        reporter.events.append(("status", {"status": "succeeded"}, 1.0, 0, 5 + DRAIN_POINTS))
        reporter.flush(wait=False)
        kinds = [r["kind"] for r in spool.read_records(reporter.writer.path, 0, 1 << 30)[0]]
        assert kinds == ["scalar", "status"]
    finally:
        reporter.close(wait=False)


def test_a_forked_child_does_not_write_what_the_parent_keeps_for_disk_space(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Records the parent keeps in memory while its disk is full are the parent's to write: a child
    that inherited them wrote them into its own stream, and the points were stored twice."""
    full = True
    real_append = spool.SpoolWriter.append

    def append(writer: spool.SpoolWriter, records: list[dict[str, object]]) -> int:
        if full:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_append(writer, records)

    monkeypatch.setattr(spool.SpoolWriter, "append", append)
    ident = Identity("0123456789ab", "master", "master", 0, 0, tmp_path / "spool", None, None)
    reporter = Reporter(ident, interval=600.0)
    try:
        for i in range(100):
            reporter.scalars.append(("loss", "parent", i, float(i), 1.0, 0))
        reporter.scalars.append(("bad\x00", "parent", 0, 1.0, 1.0, 0))
        assert reporter.flush(wait=False) is False
        assert reporter.pending and reporter.disk_error
        reporter.after_fork()  # what the at-fork hook runs in a child (no process is started here)
        full = False
        reporter.scalars.append(("loss", "child", 0, 5.0, 1.0, 0))
        assert reporter.flush(wait=False) is True
        assert reporter.last_problems == []
        records, _ = spool.read_records(reporter.writer.path, 0, 1 << 30)
        keys = [k for r in records if r["kind"] == "scalar" for k in r["data"]["keys"]]
        assert keys == [["loss", "child"]]
        assert _points_in_spool(reporter) == [1]
    finally:
        reporter.close(wait=False)
