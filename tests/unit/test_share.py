"""Fair share and quotas as pure decisions: decay, the order, and the admission pass's verdicts."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pytest

from phalanx import share
from phalanx.machine.ledger import Need
from phalanx.share import HALF_LIFE_SECONDS, SHARE_POINTS, Limit, judge


@dataclass(frozen=True)
class W:
    experiment_id: str
    project: str
    need: Need = field(default_factory=lambda: Need(cpus=1))
    priority: int = 0
    since: float = 0.0


def test_usage_halves_every_half_life_and_running_usage_accrues_the_same_way() -> None:
    assert share.decayed(100.0, at=0.0, now=HALF_LIFE_SECONDS) == pytest.approx(50.0)
    assert share.decayed(100.0, at=0.0, now=3 * HALF_LIFE_SECONDS) == pytest.approx(12.5)
    # a short hold counts about its core-seconds; a very long one tends to cores * H / ln 2
    assert share.accrued(2, since=0.0, now=10.0) == pytest.approx(20.0, rel=1e-2)
    assert share.accrued(2, since=0.0, now=100 * HALF_LIFE_SECONDS) == pytest.approx(
        2 * HALF_LIFE_SECONDS / math.log(2)
    )
    # folding a run in at its end and decaying it later equals accruing it continuously
    a = share.decayed(share.accrued(4, 0.0, 1000.0), at=1000.0, now=5000.0)
    b = share.accrued(4, 0.0, 5000.0) - share.accrued(4, 1000.0, 5000.0)
    assert a == pytest.approx(b)


def test_the_penalty_grows_with_the_share_of_the_machine_used_up_to_share_points() -> None:
    most = 8 * HALF_LIFE_SECONDS / math.log(2)
    assert share.penalty(0.0, 8) == 0.0
    assert share.penalty(most / 2, 8) == pytest.approx(SHARE_POINTS / 2)
    assert share.penalty(most * 5, 8) == SHARE_POINTS
    # the same core-seconds weigh less on a bigger machine
    assert share.penalty(3600.0, 64) < share.penalty(3600.0, 8)


def test_at_equal_priority_the_project_with_less_recent_usage_goes_first() -> None:
    busy = share.score(0, since=0.0, now=1.0, usage=10.0, machine_cores=2)
    idle = share.score(0, since=0.5, now=1.0, usage=0.0, machine_cores=2)
    assert idle > busy
    # an explicit priority point outweighs a little usage
    assert share.score(1, since=0.0, now=1.0, usage=10.0, machine_cores=2) > idle


def test_a_run_over_its_projects_quota_waits_and_reserves_nothing() -> None:
    waiting = [W("v2", "vision"), W("n1", "nlp")]
    held = {"vision": [1.0, 0.0, 0.0]}
    verdicts = judge(waiting, held, (1, 0, 1000.0), {"vision": Limit(cores=1)}, {}, {})
    assert verdicts["v2"] == share.Verdict(False, quota="project vision at its 1-core quota")
    assert verdicts["v2"].why() == "project vision at its 1-core quota"
    assert verdicts["n1"].starts  # the core vision may not use is nlp's to take


def test_quota_counts_what_runs_ahead_are_owed_and_says_how_much_is_in_use() -> None:
    waiting = [W("a", "vision", Need(cpus=2)), W("b", "vision", Need(cpus=2))]
    verdicts = judge(waiting, {"vision": [6.0, 0, 0]}, (8, 0, 0.0), {"vision": Limit(cores=8)}, {}, {})
    assert verdicts["a"].starts
    assert not verdicts["b"].starts
    assert verdicts["b"].quota == "project vision at its 8-core quota"
    partial = judge(
        [W("c", "vision", Need(cpus=4))], {"vision": [6.0, 0, 0]}, (8, 0, 0), {"vision": Limit(8)}, {}, {}
    )
    assert partial["c"].quota == "project vision at its 8-core quota (6 in use or owed, this run needs 4)"
    memory = judge(
        [W("m", "nlp", Need(memory_mib=4096))], {}, (8, 0, 1e6), {"nlp": Limit(memory_mib=2048)}, {}, {}
    )
    assert memory["m"].quota.startswith("project nlp at its 2048 MiB quota")


def test_why_a_run_waits_names_resources_and_the_runs_ahead_by_share() -> None:
    waiting = [W("n1", "nlp", Need(cpus=2)), W("v1", "vision", Need(cpus=2))]
    verdicts = judge(waiting, {}, (2, 0, 0.0), {}, {"n1": 0.0, "v1": 0.0}, {"n1": 0.0, "v1": 0.3})
    assert verdicts["n1"].starts
    assert verdicts["v1"].why() == "behind 1 run of higher share"
    short = judge([W("x", "p", Need(cpus=4))], {}, (2, 0, 0.0), {}, {}, {})
    assert short["x"].why() == "waits for 4 cores (2 free)"
    by_priority = judge(waiting, {}, (3, 0, 0.0), {}, {"n1": 5.0, "v1": 0.0}, {"n1": 0.0, "v1": 0.0})
    assert by_priority["v1"].why() == "1 run ahead of it in the queue"


def test_a_need_beyond_the_quota_itself_is_refused_with_the_command_to_raise_it() -> None:
    text = share.never_within("vision", Need(cpus=2), Limit(cores=1))
    assert "needs 2 cores, more than project vision's quota on local (1)" in text
    assert "phalanx quota set vision --target local" in text
    assert share.never_within("vision", Need(cpus=1), Limit(cores=1)) == ""
    assert share.never_within("vision", Need(cpus=9), None) == ""
