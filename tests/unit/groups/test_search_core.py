"""The search's decisions (``phalanx.groups.core``) driven by a simulated world: no process, no
store, no clock. Each simulated trial "runs" one step a tick and reports a loss that depends on its
values; the simulator carries out the core's operations the way the controller does (record, launch,
prune, stop, finish). A controller killed with SIGKILL is simulated by throwing the core away at a
chosen point and opening a new one on the same Optuna storage with the trials "the store" has.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from phalanx.domain import GroupStatus, Trial, TrialState
from phalanx.groups import core
from phalanx.spec.group import HPTuning, load_group_text

optuna = pytest.importorskip("optuna")


def hptuning(text: str) -> HPTuning:
    doc = (
        "version: 1\nkind: group\nname: sim\nframework: pytorch\nparams: {steps: 6}\n"
        f"hptuning:\n{text}"
        "run:\n  cmd: python train.py {{ x }} {{ y }} {{ steps }}\n"
    )
    return load_group_text(doc, "sim.yml", allow_unused=True).hptuning


MATRIX = "  matrix:\n    x: {uniform: 0:1}\n    y: {values: [1, 2, 3]}\n"
LOSS = "  metric: {name: loss, optimization: minimize}\n"
RANDOM = hptuning("  concurrency: 2\n  random_search: {n_experiments: 8, seed: 5}\n" + LOSS + MATRIX)
TPE = hptuning(
    "  concurrency: 2\n  bo: {n_iterations: 10, n_initial_trials: 3, seed: 5, metric: {name: loss}}\n"
    + MATRIX
)
GRID = hptuning(
    "  concurrency: 3\n  grid_search: {}\n  seed: 2\n"
    + LOSS
    + "  matrix:\n    x: {values: [0.1, 0.5, 0.9]}\n"
    "    y: {values: [1, 2, 3]}\n"
)
HYPERBAND = hptuning(
    "  concurrency: 3\n  hyperband:\n    max_iter: 9\n    eta: 3\n    seed: 5\n"
    "    resource: {name: steps, type: int}\n    metric: {name: loss, optimization: minimize}\n" + MATRIX
)


def loss(params: dict[str, Any], step: int) -> float:
    return float(params["x"]) + 0.1 * float(params["y"]) + 1.0 / step


@dataclass
class World:
    """What outlives a controller: the store's trial records, the running experiments, the study."""

    storage: Any
    steps: int = 6
    records: dict[int, Trial] = field(default_factory=dict)
    running: dict[int, int] = field(default_factory=dict)  # trial number -> steps it has run
    ended: set[int] = field(default_factory=set)  # trials whose experiment ended on its own
    launched: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    status: GroupStatus | None = None
    reason: str | None = None
    kill: str | None = None  # where the controller is to die next (start, launch, prune)
    kills: int = 0  # how many times it died


class Killed(Exception):
    """The simulated SIGKILL of the controller."""


def trial_steps(world: World, t: Trial) -> int:
    return int(t.params.get("steps", world.steps))


def series(world: World, number: int) -> dict[int, float]:
    t = world.records[number]
    ran = trial_steps(world, t) if number in world.ended else world.running.get(number, 0)
    return {s: loss(dict(t.params), s) for s in range(1, ran + 1)}


def finals(world: World, number: int) -> dict[str, float]:
    t = world.records[number]
    return {"loss": loss(dict(t.params), trial_steps(world, t))}


def open_search(hp: HPTuning, world: World, seed: int = 11) -> tuple[core.Search, list[core.Operation]]:
    search = core.Search(hp, name="g", seed=seed, planned=hp.planned_trials(), storage=world.storage)
    done = {n: finals(world, n) for n, t in world.records.items() if t.state is TrialState.DONE}
    return search, search.restore(list(world.records.values()), done)


def record(world: World, number: int, **changes: Any) -> None:
    world.records[number] = replace(world.records[number], **changes)


def die(world: World) -> None:
    world.kill = None
    world.kills += 1
    raise Killed


def apply(world: World, search: core.Search, ops: list[core.Operation]) -> None:
    for op in ops:
        if isinstance(op, core.Launch):
            if world.kill == "launch":
                die(world)  # asked the study, died before recording the trial
            t = Trial("g", op.number, f"e{op.number}", op.params, TrialState.RUNNING, internal=op.internal)
            world.records[op.number] = t
            world.running[op.number] = 0
            world.launched.append((op.number, op.params))
        elif isinstance(op, core.Prune):
            if world.kill == "prune":
                die(world)  # decided, died before stopping the trial
            world.running.pop(op.number)
            search.pruned(op.number)
            record(world, op.number, state=TrialState.PRUNED, value=op.value, step=op.step, reason=op.reason)
        elif isinstance(op, core.StopGroup):
            for number in sorted(search.running):
                world.running.pop(number)
                search.stopped(number, TrialState.STOPPED)
                record(world, number, state=TrialState.STOPPED, reason=op.trials_reason)
            world.status, world.reason = op.status, op.reason
        else:
            world.status, world.reason = op.status, op.reason


def simulate(
    hp: HPTuning,
    storage: Callable[[], Any] | None = None,
    kills: dict[int, str] | None = None,
    steps: int = 6,
    **kw: Any,
) -> World:
    """Run a whole search, tick by tick; ``kills``: tick -> where the controller dies from that tick
    on (start: before the tick, launch: once it asked for a trial, prune: once it decided to prune
    one, end: once it told the study a trial's end; each at its first chance, and only once). ``storage``:
    opens the study's storage, at the start and at each resume (default: one in memory, kept)."""
    world = World(storage() if storage else optuna.storages.InMemoryStorage(), steps=steps)
    search, ops = open_search(hp, world, **kw)
    apply(world, search, ops)
    for tick in range(500):
        world.kill = (kills or {}).get(tick, world.kill)
        try:
            if world.kill == "start":
                die(world)
            apply(world, search, search.next())
            if world.status is not None:
                return world
            for number in sorted(world.running):  # every running experiment runs one more step
                t = world.records[number]
                world.running[number] += 1
                ended = world.running[number] >= trial_steps(world, t)
                apply(world, search, search.report(number, series(world, number), ended=ended))
                if ended and number in world.running:
                    world.running.pop(number)
                    world.ended.add(number)
            for number in sorted(world.ended & set(search.running)):  # seen ended: recorded
                search.report(number, series(world, number), ended=True)
                out = search.ended(number, "succeeded", None, finals(world, number))
                if world.kill == "end":
                    die(world)  # told the study, died before recording the outcome
                record(world, number, state=out.state, value=out.value, step=out.step)
        except Killed:
            if storage:
                world.storage = storage()
            search, ops = open_search(hp, world, **kw)  # `phalanx group resume`
            apply(world, search, ops)
    raise AssertionError("the search never finished")


def best(world: World) -> Trial | None:
    from phalanx.domain import best_trial

    return best_trial(list(world.records.values()), "minimize")


def test_random_search_runs_its_trials_two_at_a_time_and_finds_the_best() -> None:
    world = simulate(RANDOM)
    assert world.status is GroupStatus.SUCCEEDED and world.reason is None
    assert [n for n, _ in world.launched] == list(range(8))
    assert all(t.state is TrialState.DONE for t in world.records.values())
    values = [p["x"] for _, p in world.launched]
    assert len(set(values)) == 8 and all(0 <= x <= 1 for x in values)
    found = best(world)
    assert found is not None and found.value == min(t.value or math.inf for t in world.records.values())
    # the same seed proposes the same values; another seed others
    assert simulate(RANDOM).launched == world.launched
    assert simulate(RANDOM, seed=12).launched != world.launched


def test_grid_search_covers_every_combination_once() -> None:
    world = simulate(GRID)
    combos = [(p["x"], p["y"]) for _, p in world.launched]
    assert sorted(combos) == sorted((x, y) for x in (0.1, 0.5, 0.9) for y in (1, 2, 3))
    assert world.status is GroupStatus.SUCCEEDED
    found = best(world)
    assert found is not None and dict(found.params) == {"x": 0.1, "y": 1}


def test_tpe_is_guided_by_the_finished_trials() -> None:
    world = simulate(TPE)
    assert len(world.launched) == 10 and world.status is GroupStatus.SUCCEEDED
    longer = hptuning(
        "  concurrency: 1\n  bo: {n_iterations: 30, n_initial_trials: 5, seed: 5, metric: {name: loss}}\n"
        + MATRIX
    )
    x = [p["x"] for _, p in simulate(longer).launched]
    # after the random start TPE proposes near the best so far (x -> 0): the last ten trials' x
    # lie far below the random start's
    assert sum(x[-10:]) / 10 < 0.5 * sum(x[:5]) / 5, x


def test_hyperband_gives_the_budget_and_prunes_at_its_rungs() -> None:
    world = simulate(HYPERBAND)
    assert len(world.launched) == HYPERBAND.planned_trials() == 17
    assert all(p["steps"] == 9 for _, p in world.launched)  # the budget, as a param
    pruned = [t for t in world.records.values() if t.state is TrialState.PRUNED]
    assert pruned and all((t.step or 0) < 9 for t in pruned)
    assert all((t.reason or "").startswith(f"pruned at step {t.step}: loss ") for t in pruned)
    assert world.status is GroupStatus.SUCCEEDED


def test_median_pruning_stops_a_trial_worse_than_the_median() -> None:
    hp = hptuning(
        "  concurrency: 1\n  grid_search: {}\n  seed: 1\n"
        + LOSS
        + "  pruning: {kind: median, warmup_steps: 2, min_trials: 1}\n"
        "  matrix:\n    x: {values: [0.1, 0.2, 0.9]}\n    y: {values: [1]}\n"
    )
    world = simulate(hp)
    states = {t.params["x"]: t for t in world.records.values()}
    assert states[0.9].state is TrialState.PRUNED
    assert "> median" in (states[0.9].reason or "") and (states[0.9].step or 0) < 6
    assert best(world) is not None and best(world).params["x"] == 0.1  # type: ignore[union-attr]


def test_early_stopping_ends_the_group_once_a_finished_trial_reaches_the_value() -> None:
    hp = hptuning(
        "  concurrency: 2\n  random_search: {n_experiments: 30, seed: 5}\n"
        + LOSS
        + "  early_stopping:\n    - {metric: loss, value: 0.6, optimization: minimize}\n"
        + MATRIX
    )
    world = simulate(hp)
    assert world.status is GroupStatus.SUCCEEDED
    assert world.reason is not None and world.reason.startswith("early stopping: trial ")
    assert "loss" in world.reason and "<= 0.6" in world.reason
    assert len(world.launched) < 30
    done = [t for t in world.records.values() if t.state is TrialState.DONE]
    assert any((t.value or 1) <= 0.6 for t in done)
    stopped = [t for t in world.records.values() if t.state is TrialState.STOPPED]
    assert all(t.reason == f"group {world.reason}" for t in stopped)


def test_every_trial_failing_fails_the_group_and_a_stop_stops_it() -> None:
    search = core.Search(RANDOM, name="g", seed=1, planned=2, storage=optuna.storages.InMemoryStorage())
    search.restore([])
    launches = search.next()
    assert [type(op) for op in launches] == [core.Launch, core.Launch]
    for op in launches:
        assert isinstance(op, core.Launch)
        out = search.ended(op.number, "failed", "exit status 1")
        assert out.state is TrialState.FAILED and out.reason == "exit status 1"
    assert search.next() == [core.Finish(GroupStatus.FAILED, "every trial failed")]
    other = core.Search(RANDOM, name="h", seed=1, planned=8, storage=optuna.storages.InMemoryStorage())
    other.restore([])
    other.next()
    stop = core.StopGroup(GroupStatus.STOPPED, "stopped by SIGTERM", "stopped by SIGTERM")
    assert other.stop("stopped by SIGTERM") == [stop]
    assert other.next() == [stop]


def test_a_succeeded_trial_without_the_metric_is_named() -> None:
    search = core.Search(RANDOM, name="g", seed=1, planned=1, storage=optuna.storages.InMemoryStorage())
    search.restore([])
    (op,) = search.next()
    assert isinstance(op, core.Launch)
    out = search.ended(op.number, "succeeded", None)
    assert out.state is TrialState.DONE and out.value is None and out.missing_metric


KILLS = {
    "start": {3: "start", 9: "start", 14: "start"},
    "launch": {0: "launch", 5: "launch", 12: "launch"},
    "prune": {10: "prune", 16: "prune", 19: "prune"},
    "end": {4: "end", 11: "end", 18: "end"},
}
SEARCHES = [
    pytest.param(hp, where, id=f"{name}-{where}")
    for name, hp in (("random", RANDOM), ("tpe", TPE), ("hyperband", HYPERBAND), ("grid", GRID))
    for where in KILLS
    if where != "prune" or hp is HYPERBAND  # the others prune nothing
]


@pytest.mark.parametrize(("hp", "where"), SEARCHES)
def test_a_killed_and_resumed_search_proposes_what_an_uninterrupted_one_proposes(
    hp: HPTuning, where: str
) -> None:
    whole = simulate(hp)
    resumed = simulate(hp, kills=KILLS[where])
    assert resumed.kills >= 2  # (the controller died and was resumed, twice at least)
    assert resumed.launched == whole.launched
    assert {n: (t.state, t.value, t.step) for n, t in resumed.records.items()} == {
        n: (t.state, t.value, t.step) for n, t in whole.records.items()
    }
    assert (resumed.status, resumed.reason) == (whole.status, whole.reason)


def test_the_study_persists_in_its_sqlite_file(tmp_path: Path) -> None:
    """The controller's storage (``search.study_storage``): each resume opens the file anew."""
    from phalanx.groups.search import study_storage

    opened: list[Any] = []

    def reopen() -> Any:
        opened.append(study_storage(tmp_path / "g"))
        return opened[-1]

    resumed = simulate(TPE, storage=reopen, kills={2: "launch", 9: "start"})
    assert resumed.kills == 2
    assert len(opened) == 3 and len({id(s) for s in opened}) == 3
    assert resumed.launched == simulate(TPE).launched
    assert (tmp_path / "g" / "study.sqlite").is_file()


def test_a_group_recorded_before_the_study_was_kept_is_resumed_by_one_replay() -> None:
    """Trials recorded by an older Phalanx (no study file, no Optuna number): the finished ones are
    replayed into the new study once, the running one is adopted, the rest launched."""
    old = [
        Trial(
            "g",
            0,
            "e0",
            {"x": 0.3, "y": 1},
            TrialState.DONE,
            value=0.5,
            internal={"params": {"x": 0.3, "y": 1}},
        ),
        Trial("g", 1, "e1", {"x": 0.7, "y": 2}, TrialState.RUNNING, internal={"params": {"x": 0.7, "y": 2}}),
    ]
    storage = optuna.storages.InMemoryStorage()
    search = core.Search(RANDOM, name="g", seed=5, planned=4, storage=storage)
    assert search.restore(old, series=lambda t: {1: 0.9, 2: 0.5}) == []
    launches = search.next()
    assert [op.number for op in launches if isinstance(op, core.Launch)] == [2]  # concurrency 2
    study = optuna.load_study(study_name="g", storage=storage)
    first = study.trials[0]
    assert (
        first.state.name == "COMPLETE"
        and first.value == 0.5
        and first.intermediate_values == {1: 0.9, 2: 0.5}
    )
    out = search.ended(1, "succeeded", None)  # the adopted trial reported nothing: no metric
    assert out.missing_metric and search.report(2, {1: 0.4}, ended=False) == []
    assert [op.number for op in search.next() if isinstance(op, core.Launch)] == [3]
