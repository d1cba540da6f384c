"""A group's controller wakes the moment a trial's supervisor records its end (a byte in the
group's wake FIFO, ``LaunchOptions.notify``) instead of at its next 0.3 s poll; between trials the
FIFO never reads as end-of-file (which would turn the wait into a busy loop). No process starts."""

from __future__ import annotations

import os
import select
import time
from pathlib import Path
from types import SimpleNamespace

from phalanx.groups.controller import Controller
from phalanx.supervisor.recording import notify


def _controller(folder: Path) -> Controller:
    ctl = Controller.__new__(Controller)  # only the waiting part: no store, no group file
    ctl.folder = folder
    ctl.group = SimpleNamespace(id="g1")  # type: ignore[assignment]
    ctl.live = {}
    ctl.wake_on_exit = True
    ctl._pidfds = {}
    ctl._wake = None
    ctl._lock_fd = None
    return ctl


def test_a_recorded_end_wakes_the_controller_at_once_and_the_fifo_is_drained(tmp_path: Path) -> None:
    ctl = _controller(tmp_path)
    ctl._open_wake()
    assert ctl._wake is not None
    read_end = ctl._wake[0]
    try:
        notify(str(tmp_path / "wake.fifo"))  # what a trial's supervisor does after its outcome
        started = time.monotonic()
        ctl._wait(60.0)  # without the wake-up this would sleep the whole minute
        assert time.monotonic() - started < 30.0  # generous: the promise is "at once", not a poll
        # drained, and no end-of-file while nobody writes: the next wait sleeps, it does not spin
        assert select.select([read_end], [], [], 0)[0] == []
        assert set(ctl._inherited()) == set(ctl._wake)  # what a forked trial supervisor closes
    finally:
        ctl._close_pidfds()
    assert ctl._wake is None


def test_notify_without_a_controller_reading_is_harmless(tmp_path: Path) -> None:
    fifo = tmp_path / "wake.fifo"
    os.mkfifo(fifo)
    notify(str(fifo))  # no reader: ENXIO, ignored
    notify(str(tmp_path / "missing.fifo"))  # no FIFO at all
