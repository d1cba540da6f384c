"""The queue's doorbell: a holder leaving the ledger wakes the waiters at once instead of at their
next look; a dead waiter's pipe is cleared; with no pipe possible a waiter still waits (polls)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from phalanx.machine import doorbell
from phalanx.machine.ledger import Capacity, Ledger, Need

TWO = Capacity(cpus=(0, 1), gpus=(), memory_mib=1000.0)


def test_releasing_a_holder_rings_the_waiter_it_lets_in(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger.json")
    assert ledger.admit("first", Need(cpus=2), TWO, pid=os.getpid())[0] is not None
    assert ledger.admit("second", Need(cpus=2), TWO, pid=os.getpid())[0] is None  # waits
    with doorbell.Bell(doorbell.bells_folder(ledger.path), "second") as bell:
        assert not bell.wait(0)  # nothing happened yet
        releaser = threading.Thread(target=ledger.release, args=("first",))
        releaser.start()
        assert bell.wait(60)  # True only when rung (no ring: False after 60 s)
        releaser.join()
        assert ledger.admit("second", Need(cpus=2), TWO, pid=os.getpid())[0] is not None
        assert not bell.wait(0)  # the ring was read: the next wait sleeps again
    assert not bell.path.exists()  # a finished waiter leaves no pipe behind


def test_a_release_of_nothing_rings_nobody(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger.json")
    with doorbell.Bell(doorbell.bells_folder(ledger.path), "waiter") as bell:
        assert not ledger.release("never-admitted")
        assert not bell.wait(0)


def test_every_waiter_is_rung_and_a_dead_waiters_pipe_is_removed(tmp_path: Path) -> None:
    folder = tmp_path / "bells"
    with doorbell.Bell(folder, "a") as a, doorbell.Bell(folder, "b") as b:
        dead = folder / "c"
        os.mkfifo(dead)  # what a killed waiter leaves: a pipe nobody reads
        assert doorbell.ring(folder) == 2
        assert a.wait(0) and b.wait(0)
        assert not dead.exists()


def test_without_a_pipe_the_waiter_still_waits_for_its_look(tmp_path: Path) -> None:
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")  # the bells folder cannot be made here
    bell = doorbell.Bell(blocked, "w")
    assert not bell.wait(0.01)  # no ring can come: it sleeps its look and says so
    bell.close()
    assert doorbell.ring(blocked) == 0
