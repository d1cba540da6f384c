"""Groups and trials in the store (SQLite and PostgreSQL): written before a trial is launched, read
back by a resumed controller, linked to the trial's experiment, the best one picked."""

from __future__ import annotations

import pytest

from phalanx.errors import NotFound
from phalanx.groups import records
from phalanx.store.base import ExperimentFilter
from phalanx.store.sql import SqlStore


def new_group(store: SqlStore, optimization: str = "minimize") -> records.Group:
    return records.create_group(
        store,
        name="g",
        project="p",
        search="random",
        planned=3,
        concurrency=2,
        metric="loss",
        optimization=optimization,
        spec_text="version: 1\n",
        source_file=None,
        workdir="/tmp",
        options={"params": {"a": 1}},
    )


def test_trials_are_recorded_linked_and_the_best_is_picked(store: SqlStore) -> None:
    g = new_group(store)
    assert records.get_group(store, g.id[:5]).options == {"params": {"a": 1}}
    values = [("done", 0.5), ("pruned", 0.1), ("done", 0.3)]
    for n, (state, value) in enumerate(values):
        exp = store.create_experiment(name=f"g-{n}", project="p")
        records.add_trial(
            store, records.Trial(g.id, n, exp.id, {"x": n}, "launching", internal={"params": {"x": n}})
        )
        records.update_trial(store, g.id, n, state=state, value=value, step=10)
        records.link_experiment(store, exp.id, g.id)
    store.create_experiment(name="other", project="p")
    trials = records.list_trials(store, g.id)
    assert [t.state for t in trials] == ["done", "pruned", "done"]
    assert trials[0].internal == {"params": {"x": 0}}
    best = records.best_trial(trials, "minimize")
    assert best is not None and best.number == 2  # a pruned trial is never the best
    assert records.best_trial(trials, "maximize").number == 0  # type: ignore[union-attr]
    linked = store.list_experiments(ExperimentFilter(group_id=g.id)).items
    assert sorted(e.name for e in linked) == ["g-0", "g-1", "g-2"]
    assert all(e.group_id == g.id for e in linked)
    assert records.count_trials(store, g.id) == 3
    records.update_group(store, g.id, status="succeeded", stop_requested=True)
    again = records.get_group(store, g.id)
    assert again.done and again.stop_requested
    assert [x.id for x in records.list_groups(store)] == [g.id]
    with pytest.raises(NotFound):
        records.get_group(store, "ffffffffffff")
    records.delete_group(store, g.id)
    assert records.list_groups(store) == []
