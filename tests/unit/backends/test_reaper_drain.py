"""The reaper's last copy of a replica's pipes once its processes ended (Reaper.drain): every line
left in a pipe reaches the log however late the reaper gets to run, a pipe at its end finishes at
once, and only a pipe held open and empty (by a process outside the tree) is given up on."""

from __future__ import annotations

import contextlib
import os
import selectors
from collections.abc import Iterator
from pathlib import Path

import pytest

from phalanx.backends.local.reaper import DRAIN_STALL_SECONDS, LogSink, Reaper


class SlowMachine:
    """A clock on a loaded machine: every look at it finds ``step`` seconds gone (the reaper was
    not scheduled in between)."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 1000.0, step
        self.looks = 0

    def __call__(self) -> float:
        self.now += self.step
        self.looks += 1
        return self.now


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    yield read_end, write_end
    for fd in (read_end, write_end):
        with contextlib.suppress(OSError):
            os.close(fd)


def _drain(tmp_path: Path, read_end: int, clock: SlowMachine) -> str:
    reaper = Reaper({"processes": [{}]})
    log = LogSink(tmp_path / "replica.log")
    sel = selectors.DefaultSelector()
    reaper.buffers[read_end] = b""
    sel.register(read_end, selectors.EVENT_READ, (0, False))
    reaper.drain(sel, log, clock)
    log.close()
    sel.close()
    return (tmp_path / "replica.log").read_text()


def test_the_last_lines_reach_the_log_however_late_the_reaper_runs(
    tmp_path: Path, pipe: tuple[int, int]
) -> None:
    """A fixed 2-second window from the processes' end lost them when the reaper was not scheduled
    within it (three seconds pass between each of its looks here)."""
    read_end, write_end = pipe
    last = b"epoch 9 loss 0.1\nTraceback: the last words\n"
    os.write(write_end, last)
    assert _drain(tmp_path, read_end, SlowMachine(step=3.0)) == last.decode()


def test_a_pipe_at_its_end_finishes_the_drain_without_waiting(tmp_path: Path, pipe: tuple[int, int]) -> None:
    read_end, write_end = pipe
    os.write(write_end, b"done\nno newline at the end")
    os.close(write_end)
    clock = SlowMachine(step=0.0)  # time stands still: only the pipe's end can finish it
    assert _drain(tmp_path, read_end, clock) == "done\nno newline at the end\n"


def test_a_pipe_held_open_and_empty_is_given_up_on(tmp_path: Path, pipe: tuple[int, int]) -> None:
    read_end, _write_end = pipe  # a process outside the tree keeps the write end
    clock = SlowMachine(step=0.5)
    assert _drain(tmp_path, read_end, clock) == ""
    assert clock.looks <= DRAIN_STALL_SECONDS / 0.5 + 2
