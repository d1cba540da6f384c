"""A controller killed while it launched a trial leaves a run folder and maybe a supervisor still
creating the experiment; the resumed controller asks ``launched`` whether to wait for it. It waits
only while that supervisor lives (it holds the folder's LAUNCH_LOCK, here held by the test), and
answers at once when none does (it used to wait 180 s for a launch nobody was making)."""

from __future__ import annotations

import os
from pathlib import Path

from phalanx.groups.controller import launched
from phalanx.machine.locks import hold
from phalanx.runner.options import LAUNCH_LOCK


class Appears:
    """``exists`` of an experiment that is created at the ``after``-th look."""

    def __init__(self, after: int) -> None:
        self.after, self.looks = after, 0

    def __call__(self) -> bool:
        self.looks += 1
        return self.looks >= self.after


def test_an_existing_experiment_was_launched(tmp_path: Path) -> None:
    assert launched(tmp_path / "gone", Appears(1))


def test_without_a_run_folder_the_launch_never_began(tmp_path: Path) -> None:
    assert not launched(tmp_path / "never-made", Appears(10**9))


def test_a_folder_whose_launcher_is_gone_is_launched_again_at_once(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()  # made by the controller before it was killed; no supervisor holds it
    looks = Appears(10**9)
    assert not launched(tmp_path / "run", looks, timeout=3600)  # no wait for the hour
    assert looks.looks == 2  # once before, once after seeing the lock free


def test_a_live_supervisor_is_waited_for_until_it_creates_the_experiment(tmp_path: Path) -> None:
    lock = hold(tmp_path / "run" / LAUNCH_LOCK)  # the supervisor, still creating the experiment
    assert lock is not None
    try:
        looks = Appears(3)
        assert launched(tmp_path / "run", looks, timeout=3600)
        assert looks.looks == 3
    finally:
        os.close(lock)


def test_a_supervisor_that_ends_without_creating_it_is_not_waited_for_longer(tmp_path: Path) -> None:
    lock = hold(tmp_path / "run" / LAUNCH_LOCK)
    assert lock is not None
    looks = []

    def exists() -> bool:
        looks.append(1)
        if len(looks) == 2:  # the supervisor dies between the second and third look
            os.close(lock)
        return False

    assert not launched(tmp_path / "run", exists, timeout=3600)
    assert len(looks) == 3
