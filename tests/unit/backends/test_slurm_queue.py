"""One squeue per interval, shared by every experiment, backing off while nothing changes."""

from __future__ import annotations

import subprocess

from phalanx.backends.slurm_queue import BASE_SECONDS, MAX_SECONDS, SlurmQueue
from tests.support.clock import ManualClock


def test_many_describes_share_one_query_per_interval_and_back_off_while_nothing_changes() -> None:
    clock = ManualClock(100.0)
    listing = ["12|PENDING|Resources\n13+0|RUNNING|None\n13+1|RUNNING|None\n"]
    calls: list[list[str]] = []

    def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        return subprocess.CompletedProcess(argv, 0, listing[0], "")

    queue = SlurmQueue(run, clock)
    for _ in range(50):  # two experiments polled ten times a second for 2.5 s
        assert queue.job("12") is not None and queue.job("13") is not None
        clock.now += 0.05
    assert len(calls) == 2  # t=0 and t=2 s, not 100
    assert queue.job("12").reason == "Resources"  # type: ignore[union-attr]
    assert queue.job("13").state == "RUNNING"  # type: ignore[union-attr]  # a hetjob's leader speaks
    for _ in range(20):  # nothing changes: the interval grows up to MAX_SECONDS
        clock.now += MAX_SECONDS
        queue.job("12")
    assert queue.interval == MAX_SECONDS
    listing[0] = "12|RUNNING|None\n"
    clock.now += MAX_SECONDS
    queue.job("12")
    assert queue.interval == BASE_SECONDS  # a change: back to the base interval


def test_a_job_submitted_after_the_snapshot_forces_a_fresh_one() -> None:
    clock = ManualClock(100.0)
    calls: list[int] = []

    def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
        calls.append(1)
        return subprocess.CompletedProcess(argv, 0, "7|PENDING|None\n" if len(calls) > 1 else "", "")

    queue = SlurmQueue(run, clock)
    assert queue.job("7") is None
    clock.now += 0.1
    assert queue.job("7", submitted_at=clock.now - 0.05) is not None
    assert len(calls) == 2
