"""The ledger with quotas and fair share: a project over its quota waits while another's run takes the
free cores; recent usage reorders the queue; max-waiting refuses; usage survives in the file."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from phalanx.machine.ledger import Capacity, Ledger, Need, NeverFits, TooManyWaiting
from phalanx.share import Limit

TWO = Capacity(cpus=(0, 1), gpus=(), memory_mib=1000.0)
ONE = Capacity(cpus=(0,), gpus=(), memory_mib=1000.0)


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    return Ledger(tmp_path / "ledger.json")


@pytest.fixture
def owner() -> int:
    """A live process to own the entries: this test's own (alive throughout; the ledger's default)."""
    return os.getpid()


def test_a_project_at_its_quota_waits_while_another_takes_the_free_core(ledger: Ledger, owner: int) -> None:
    limits = {"vision": Limit(cores=1)}
    one = Need(cpus=1)

    def admit(i: str, project: str) -> bool:
        grant, _ = ledger.admit(i, one, TWO, pid=owner, project=project, limits=limits)
        return grant is not None

    assert admit("v1", "vision")
    assert not admit("v2", "vision")  # fits the machine, not the quota
    assert admit("n1", "nlp")  # arrived later: the core v2 may not take is free for it
    holding, waiting, _ = ledger.snapshot()
    assert [e.experiment_id for e in holding] == ["v1", "n1"]
    assert [(e.experiment_id, e.project) for e in waiting] == [("v2", "vision")]
    ledger.release("v1")
    assert admit("v2", "vision")
    # without the quota both vision runs would have held the machine at once
    assert not admit("v3", "vision")


def test_the_project_with_fewer_recent_core_seconds_goes_first(ledger: Ledger, owner: int) -> None:
    one = Need(cpus=1)
    assert ledger.admit("v1", one, ONE, pid=owner, project="vision")[0] is not None
    for i in ("v2", "v3"):
        assert ledger.admit(i, one, ONE, pid=owner, project="vision")[0] is None
    assert ledger.admit("n1", one, ONE, pid=owner, project="nlp")[0] is None  # arrives last
    time.sleep(0.01)  # v1 holds for a measurable moment (its core-seconds are vision's usage)
    ledger.release("v1")
    _, waiting, _ = ledger.snapshot()
    assert [e.experiment_id for e in waiting] == ["n1", "v2", "v3"]
    assert ledger.admit("v2", one, ONE, pid=owner, project="vision")[0] is None  # n1 is owed the core
    assert ledger.admit("n1", one, ONE, pid=owner, project="nlp")[0] is not None
    doc = json.loads(ledger.path.read_text())
    assert doc["usage"]["vision"]["core_seconds"] > 0 and "nlp" not in doc["usage"]


def test_priority_still_orders_runs_within_a_project_and_ties_keep_arrival(
    ledger: Ledger, owner: int
) -> None:
    four = Capacity(cpus=(0, 1, 2, 3), gpus=(), memory_mib=1000.0)
    ledger.admit("big", Need(cpus=4), four, pid=owner, project="a")
    for name, prio in (("low", 0), ("high", 5), ("low2", 0)):
        assert ledger.admit(name, Need(cpus=4), four, pid=owner, priority=prio, project="a")[0] is None
    assert [e.experiment_id for e in ledger.snapshot()[1]] == ["high", "low", "low2"]


def test_max_waiting_refuses_the_next_run_that_would_wait(ledger: Ledger, owner: int) -> None:
    limits = {"vision": Limit(cores=1, max_waiting=2)}
    one = Need(cpus=1)
    assert ledger.admit("v1", one, TWO, pid=owner, project="vision", limits=limits)[0] is not None
    for i in ("v2", "v3"):
        assert ledger.admit(i, one, TWO, pid=owner, project="vision", limits=limits)[0] is None
    with pytest.raises(TooManyWaiting, match="project vision already has 2 experiments waiting"):
        ledger.admit("v4", one, TWO, pid=owner, project="vision", limits=limits)
    assert "v4" not in {e.experiment_id for e in ledger.snapshot()[1]}
    # a waiting run asking again is not a new one; another project is not limited
    assert ledger.admit("v3", one, TWO, pid=owner, project="vision", limits=limits)[0] is None
    assert ledger.admit("n1", one, TWO, pid=owner, project="nlp", limits=limits)[0] is not None


def test_a_need_beyond_the_projects_quota_never_fits(ledger: Ledger, owner: int) -> None:
    with pytest.raises(NeverFits, match="phalanx quota set vision"):
        ledger.admit("v", Need(cpus=2), TWO, pid=owner, project="vision", limits={"vision": Limit(cores=1)})
    assert ledger.snapshot()[1] == []
