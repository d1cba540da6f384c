"""A group's controller wakes the moment a trial's supervisor records its end (a byte in the
group's wake FIFO, ``LaunchOptions.notify``) instead of at its next 0.3 s poll; between trials the
FIFO never reads as end-of-file (which would turn the wait into a busy loop). No process starts."""

from __future__ import annotations

import os
import select
import time
from pathlib import Path

from phalanx.groups.waking import Waker
from phalanx.supervisor.recording import notify


def test_a_recorded_end_wakes_the_controller_at_once_and_the_fifo_is_drained(tmp_path: Path) -> None:
    waker = Waker(tmp_path)
    waker.open()
    assert waker.notify == str(tmp_path / "wake.fifo")
    read_end = waker.fds()[0]
    try:
        notify(waker.notify)  # what a trial's supervisor does once its outcome is stored
        started = time.monotonic()
        waker.wait([], 60.0)  # without the wake-up this would sleep the whole minute
        assert time.monotonic() - started < 30.0  # generous: the promise is "at once", not a poll
        # drained, and no end-of-file while nobody writes: the next wait sleeps, it does not spin
        assert select.select([read_end], [], [], 0)[0] == []
        assert len(waker.fds()) == 2  # what a supervisor forked from the controller closes
    finally:
        waker.close()
    assert waker.fds() == [] and waker.notify is None


def test_a_waker_turned_off_offers_nothing_to_notify(tmp_path: Path) -> None:
    waker = Waker(tmp_path, enabled=False)
    waker.open()
    assert waker.notify is None and waker.fds() == []
    assert not (tmp_path / "wake.fifo").exists()


def test_notify_without_a_controller_reading_is_harmless(tmp_path: Path) -> None:
    fifo = tmp_path / "wake.fifo"
    os.mkfifo(fifo)
    notify(str(fifo))  # no reader: ENXIO, ignored
    notify(str(tmp_path / "missing.fifo"))  # no FIFO at all
