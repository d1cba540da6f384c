"""Groups and trials in the store (SQLite and PostgreSQL), through the ``GroupStore`` protocol
alone: written before a trial is launched, read back by a resumed controller, linked to the
trial's experiment, the best one picked."""

from __future__ import annotations

import pytest

from phalanx.domain import ExperimentFilter, ExperimentStatus, Group, Trial, best_trial
from phalanx.errors import Conflict, NotFound, UsageError
from phalanx.store.base import GroupStore
from phalanx.store.sql import SqlStore
from tests.unit.server import fill


def new_group(store: GroupStore, optimization: str = "minimize") -> Group:
    return store.create_group(
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
    groups = store
    g = new_group(groups)
    assert groups.get_group(g.id[:5]).options == {"params": {"a": 1}}
    assert groups.resolve_group(f"  {g.id[:6].upper()} ") == g.id
    values = [("done", 0.5), ("pruned", 0.1), ("done", 0.3)]
    for n, (state, value) in enumerate(values):
        exp = groups.create_experiment(name=f"g-{n}", project="p")
        groups.add_trial(Trial(g.id, n, exp.id, {"x": n}, "launching", internal={"params": {"x": n}}))
        groups.update_trial(g.id, n, state=state, value=value, step=10)
        groups.link_experiment(exp.id, g.id)
    groups.create_experiment(name="other", project="p")
    trials = groups.list_trials(g.id)
    assert [t.state for t in trials] == ["done", "pruned", "done"]
    assert trials[0].internal == {"params": {"x": 0}}
    best = best_trial(trials, "minimize")
    assert best is not None and best.number == 2  # a pruned trial is never the best
    assert best_trial(trials, "maximize").number == 0  # type: ignore[union-attr]
    linked = groups.list_experiments(ExperimentFilter(group_id=g.id)).items
    assert sorted(e.name for e in linked) == ["g-0", "g-1", "g-2"]
    assert all(e.group_id == g.id for e in linked)
    assert groups.count_trials(g.id) == 3
    groups.update_group(g.id, status="succeeded", stop_requested=True, controller_pid=4242)
    again = groups.get_group(g.id)
    assert again.done and again.stop_requested and again.controller_pid == 4242
    groups.update_group(g.id, controller_pid=None)  # a key given as None is cleared, others kept
    cleared = groups.get_group(g.id)
    assert cleared.controller_pid is None and cleared.status == "succeeded"
    assert [x.id for x in groups.list_groups()] == [g.id]
    with pytest.raises(NotFound):
        groups.get_group("ffffffffffff")
    assert groups.remove_group(g.id) == sorted(e.id for e in linked)  # with its trials' experiments
    assert groups.list_groups() == []
    assert groups.count_trials(g.id) == 0
    assert groups.list_experiments(ExperimentFilter(group_id=g.id)).items == []


def test_a_trial_number_recorded_twice_is_a_conflict(store: SqlStore) -> None:
    """What the protocol promises: a resumed controller cannot record trial N a second time."""
    g = new_group(store)
    exp = store.create_experiment(name="g-0", project="p")
    store.add_trial(Trial(g.id, 0, exp.id, {}, "launching"))
    other = store.create_experiment(name="g-0b", project="p")
    with pytest.raises(Conflict):
        store.add_trial(Trial(g.id, 0, other.id, {}, "launching"))
    assert [t.experiment_id for t in store.list_trials(g.id)] == [exp.id]


def test_an_ambiguous_or_empty_group_id_is_refused(store: SqlStore) -> None:
    ids = {new_group(store).id for _ in range(40)}  # 40 ids over 16 first digits: a shared prefix
    shared = next(i[0] for i in ids if sum(j.startswith(i[0]) for j in ids) > 1)
    with pytest.raises(UsageError, match="ambiguous"):
        store.get_group(shared)
    with pytest.raises(NotFound):
        store.resolve_group("  ")


def test_a_group_is_deleted_only_once_it_and_all_its_experiments_have_ended(store: SqlStore) -> None:
    g = new_group(store)
    done = store.create_experiment(name="g-0", project="p")
    live = store.create_experiment(name="g-1", project="p")
    for number, exp in enumerate((done, live)):
        store.add_trial(Trial(g.id, number, exp.id, {}, "launching"))
        store.link_experiment(exp.id, g.id)
    store.update_experiment(done.id, status=ExperimentStatus.SUCCEEDED)
    store.update_experiment(live.id, status=ExperimentStatus.RUNNING)
    store.update_group(g.id, status="running")
    with pytest.raises(Conflict, match=f"group {g.id} is running; stop it before deleting it"):
        store.remove_group(g.id)
    store.update_group(g.id, status="stopped")  # its controller ended, one trial still running
    with pytest.raises(Conflict, match=f"experiment {live.id} is running"):
        store.remove_group(g.id)
    assert store.get_group(g.id).status == "stopped" and store.get_experiment(done.id).status == "succeeded"
    store.update_experiment(live.id, status=ExperimentStatus.STOPPED)
    with pytest.raises(NotFound):  # `%` and `_` are no LIKE wildcards in an id
        store.remove_group(g.id[:4] + "%%%%")
    assert store.remove_group(g.id[:8]) == sorted([done.id, live.id])
    with pytest.raises(NotFound):
        store.get_experiment(done.id)


def test_deleting_a_group_leaves_another_projects_experiment_that_took_a_trials_id(store: SqlStore) -> None:
    """A trial whose launch never made its row records an id that ingest may hand to an experiment of
    another project: deleting the group must not take that experiment with it."""
    g = new_group(store)
    store.add_trial(Trial(g.id, 0, "0123456789ab", {}, "failed"))
    other = store.create_experiment(name="audio-run", project="audio", experiment_id="0123456789ab")
    store.update_experiment(other.id, status=ExperimentStatus.SUCCEEDED)
    store.update_group(g.id, status="failed")
    assert store.remove_group(g.id) == []
    assert store.get_experiment(other.id).project == "audio"


def test_an_experiment_building_its_environment_is_not_deleted(store: SqlStore) -> None:
    exp = store.create_experiment(name="soon", project="p", status=ExperimentStatus.BUILDING)
    with pytest.raises(Conflict, match=f"experiment {exp.id} is building"):
        store.delete_experiment(exp.id)


def test_group_view_shows_each_trial_as_its_experiment_ended_when_the_row_lags(store: SqlStore) -> None:
    """A killed controller leaves its trials' rows `running`; `group get` (both doors: the view is the
    store's) shows what each experiment's record says: done with its last value, failed, pruned, or
    still running; the best and the counts follow."""
    g = new_group(store)
    store.update_group(g.id, status="running")
    ends = [
        (ExperimentStatus.SUCCEEDED, None),
        (ExperimentStatus.FAILED, "master exited 1"),
        (ExperimentStatus.STOPPED, "pruned at step 3: worse than the median"),
        (ExperimentStatus.RUNNING, None),
        (ExperimentStatus.STOPPED, "stopped on request"),  # not a prune: failed, as the controller says
        (ExperimentStatus.SUCCEEDED, None),  # without its metric
        (ExperimentStatus.SUCCEEDED, None),  # its last 20 values NaN: the last finite one counts
    ]
    reported = {0: [0.9, 0.4, 0.2], 6: [0.5, *[float("nan")] * 20]}
    for number, (status, reason) in enumerate(ends):
        exp = fill.experiment(store, name=f"g-{number}", project="p", status=status)
        store.update_experiment(exp.id, reason=reason)
        store.add_trial(Trial(g.id, number, exp.id, {"x": number}, "launching"))
        store.update_trial(g.id, number, state="running")
        if number in reported:
            fill.scalars(store, exp.id, "loss", "master", reported[number])
    doc = store.group_view(g.id)
    shown = [(t["state"], t["value"], t["step"], t["reason"]) for t in doc["trials"]]
    assert shown == [
        ("done", 0.2, 2, None),
        ("failed", None, None, "master exited 1"),
        ("pruned", None, None, "pruned at step 3: worse than the median"),
        ("running", None, None, None),
        ("failed", None, None, "stopped on request"),
        ("done", None, None, "succeeded without reporting loss"),
        ("done", 0.5, 0, None),
    ]
    assert doc["best"]["number"] == 0 and doc["best"]["value"] == 0.2
    assert doc["counts"]["done"] == 3 and doc["counts"]["running"] == 1
    assert [t.state for t in store.list_trials(g.id)] == ["running"] * 7  # a view: nothing written
