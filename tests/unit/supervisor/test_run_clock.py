"""RunClock: max_run_seconds counts the time the replicas ran, every attempt's together, never the
time pending in a cluster's queue or waiting in this machine's."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from phalanx.supervisor import clock as run_clock
from phalanx.supervisor.clock import RunClock
from tests.support.scripted import VirtualClock


@pytest.fixture
def now(monkeypatch: pytest.MonkeyPatch) -> Iterator[VirtualClock]:
    virtual = VirtualClock()
    monkeypatch.setattr(run_clock, "time", virtual)
    yield virtual


def test_only_running_time_counts_over_every_attempt(now: VirtualClock) -> None:
    clock = RunClock()
    now.sleep(50)  # pending in the cluster's queue
    assert clock.run_seconds() == 0
    clock.running()
    now.sleep(10)
    clock.running()  # still running: counted from the first call
    now.sleep(5)
    assert clock.run_seconds() == 15
    clock.pause()  # the attempt failed
    now.sleep(100)  # the restart pends
    clock.running()
    now.sleep(4)
    assert clock.run_seconds() == 19
    assert clock.past(19) and not clock.past(20)
    assert not clock.past(None) and not clock.past(0)  # no limit


def test_elapsed_starts_again_once_admitted_from_the_queue(now: VirtualClock) -> None:
    clock = RunClock()
    now.sleep(30)  # queued on this machine
    assert clock.elapsed() == 30
    clock.restart()
    now.sleep(2)
    assert clock.elapsed() == 2 and clock.run_seconds() == 0
