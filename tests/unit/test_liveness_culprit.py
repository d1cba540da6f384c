"""Which replica a hang is blamed on (supervisor.liveness): with every replica idle, the one behind
in the steps they report is named, not the one idle longest (the master waiting in all_reduce
often went idle first)."""

from __future__ import annotations

import time

from phalanx.supervisor.liveness import Liveness


def _idle(liveness: Liveness, idle: dict[str, float]) -> None:
    now = time.monotonic()
    for name, seconds in idle.items():
        liveness.last_progress[name] = now - seconds


def test_the_replica_behind_in_steps_is_named_over_the_one_idle_longest() -> None:
    liveness = Liveness(timeout=5)
    _idle(liveness, {"master": 30, "worker-0": 20})
    reason = liveness.check({"master": None, "worker-0": None}, lambda: {"master": 8, "worker-0": 7})
    assert reason is not None and reason.startswith("worker-0 made no progress"), reason
    assert "likely waiting for it: master" in reason


def test_without_steps_or_when_level_the_one_idle_longest_is_named() -> None:
    for steps in (None, lambda: {"master": 7, "worker-0": 7}, lambda: {}):
        liveness = Liveness(timeout=5)
        _idle(liveness, {"master": 30, "worker-0": 20})
        reason = liveness.check({"master": None, "worker-0": None}, steps)
        assert reason is not None and reason.startswith("master made no progress"), reason


def test_steps_are_not_read_while_every_replica_makes_progress() -> None:
    liveness = Liveness(timeout=5)
    _idle(liveness, {"master": 1, "worker-0": 2})  # neither idle for half the timeout

    def steps() -> dict[str, int]:
        raise AssertionError("read although no replica was idle")

    assert liveness.check({"master": None, "worker-0": None}, steps) is None
