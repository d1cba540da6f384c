"""The search's decisions as a pure state machine: events in, operations out.

Modelled on Determined's ``SearchMethod``: the controller (``groups.controller``) turns the world
into events (a trial reported a step, a trial's experiment ended, a stop was asked for) and carries
out the operations this returns (launch a trial with these values, prune that one, stop the group,
finish). Nothing here starts a process, reads the clock, sleeps or touches the Phalanx store, so
``tests/unit/groups/test_search_core.py`` runs whole grid, random, TPE and Hyperband searches and
the early-stopping rules in milliseconds.

Its only state besides a few counters is the Optuna study, kept in an Optuna storage the caller
chooses (in memory for a simulation; ``PHALANX_HOME/groups/ID/study.sqlite`` for a real group,
``groups.search.study_storage``). So a controller killed at any point is resumed by opening the
same storage with the store's trial records (``Search.restore``): nothing is replayed and no seed
moves, because each trial's sampler is seeded from the group's seed and the trial's number
(``groups.search.sampler_for``), not from a random state that lived in the dead process.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from phalanx.domain import GroupStatus, Trial, TrialState
from phalanx.groups import search as _search
from phalanx.spec.group import HPTuning

# -- operations: what the controller is asked to do --------------------------------------------


@dataclass(frozen=True)
class Launch:
    """Record trial ``number`` (with ``internal``, what ``restore`` needs to find it again), then
    start its experiment with ``params`` (the values its ``{{ }}`` and params receive)."""

    number: int
    params: dict[str, Any]
    internal: dict[str, Any]


@dataclass(frozen=True)
class Prune:
    """Stop trial ``number``'s experiment and record it pruned at ``step`` with ``value``."""

    number: int
    step: int
    value: float
    reason: str


@dataclass(frozen=True)
class StopGroup:
    """Stop every running trial (their experiments record ``trials_reason``), then finish the group
    with ``status`` and ``reason``."""

    status: GroupStatus
    reason: str
    trials_reason: str


@dataclass(frozen=True)
class Finish:
    """Every planned trial has ended: the group ends with ``status``."""

    status: GroupStatus
    reason: str | None


Operation = Launch | Prune | StopGroup | Finish


@dataclass(frozen=True)
class Outcome:
    """What to record of a trial whose experiment ended. ``missing_metric``: it succeeded without
    reporting the metric (the controller says what it did report, from the store)."""

    number: int
    state: TrialState
    value: float | None
    step: int | None
    reason: str | None
    missing_metric: bool = False


@dataclass
class _Running:
    """A trial that has been launched and has not ended, as the search sees it."""

    number: int
    optuna_trial: Any
    reported: set[int] = field(default_factory=set)
    last: tuple[int, float] | None = None
    pruned: Prune | None = None  # decided (and told to the study); the controller has to carry it out
    told: bool = False  # its outcome is in the study already (a controller died before recording it)


class Search:
    """One group's search. ``storage``: an Optuna storage (``optuna.storages.InMemoryStorage()`` or
    an RDB storage); ``name``: the study's name in it (the group id); ``seed``: the group's seed
    (the file's, or one derived from the group id). Make it, call ``restore`` once with the trials
    the store has, then feed it events."""

    def __init__(self, hp: HPTuning, *, name: str, seed: int, planned: int, storage: Any) -> None:
        self.hp = hp
        self.seed = seed
        self.planned = planned
        self.study = _search.open_study(hp, name, storage, seed)
        self.started = 0  # trials recorded (numbers 0 .. started-1)
        self.running: dict[int, _Running] = {}
        self.finished: dict[int, TrialState] = {}
        self.finals: dict[int, Mapping[str, float]] = {}  # done trials: last value of each metric
        self.stop_reason: str | None = None
        self.claimed: set[int] = set()  # Optuna numbers the recorded trials use

    # -- resuming -------------------------------------------------------------------------------

    def restore(
        self,
        trials: Sequence[Trial],
        finals: Mapping[int, Mapping[str, float]] | None = None,
        series: Callable[[Trial], Mapping[int, float]] | None = None,
    ) -> list[Operation]:
        """Take up the trials the store has (a resumed controller's past): finished ones are
        already in the study; unfinished ones are found again by their Optuna number.

        ``finals``: for each done trial, the last value of each early-stopping metric. ``series``:
        a finished trial's step -> value of the metric, read only for a group recorded before its
        study was kept (then replayed into it once). Returns a Prune for a trial whose pruning was
        decided but never carried out (the controller died in between)."""
        ops: list[Operation] = []
        legacy = bool(trials) and not self.study.get_trials(deepcopy=False)
        for t in sorted(trials, key=lambda t: t.number):
            self.started = max(self.started, t.number + 1)
            if "optuna_number" in t.internal:
                self.claimed.add(int(t.internal["optuna_number"]))
            if t.state.finished:
                self.finished[t.number] = t.state
                if legacy:  # recorded by a Phalanx without a persisted study: replay it once
                    params = dict(t.internal.get("params") or {})
                    history = dict(series(t)) if series else {}
                    _search.replay(self.study, self.hp, params, t.state, t.value, history)
                continue
            if legacy or "optuna_number" not in t.internal:
                ot = self._enqueue(dict(t.internal.get("params") or {}))
            else:
                ot = self._trial(int(t.internal["optuna_number"]))
            self.claimed.add(ot.number)
            frozen = self.study._storage.get_trial(ot._trial_id)
            run = _Running(t.number, ot, reported=set(frozen.intermediate_values))
            run.told = frozen.state.is_finished()
            if frozen.intermediate_values:
                step = max(frozen.intermediate_values)
                run.last = (step, frozen.intermediate_values[step])
            self.running[t.number] = run
            if frozen.state.name == "PRUNED" and run.last is not None:
                step, value = run.last
                run.pruned = Prune(t.number, step, value, self._prune_reason(step, value))
                ops.append(run.pruned)
        for number, values in (finals or {}).items():
            self.finals[number] = dict(values)
        return ops

    def _trial(self, optuna_number: int) -> Any:
        op = _search.optuna()
        storage = self.study._storage
        study_id = storage.get_study_id_from_name(self.study.study_name)
        trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, optuna_number)
        return op.trial.Trial(self.study, trial_id)

    def _enqueue(self, params: dict[str, Any]) -> Any:
        self.study.enqueue_trial(params, skip_if_exists=False)
        ot = self.study.ask()
        _search.sample(ot, self.hp)  # the enqueued values: the same params again
        return ot

    # -- asking ---------------------------------------------------------------------------------

    def next(self) -> list[Operation]:
        """What to do now that nothing else is pending: stop the group (asked for, or an
        early-stopping rule reached), launch trials up to ``concurrency``, or finish."""
        if self.stop_reason is not None:
            return [StopGroup(GroupStatus.STOPPED, self.stop_reason, self.stop_reason)]
        reached = self.early_stop_reached()
        if reached:
            return [
                StopGroup(
                    GroupStatus.SUCCEEDED, f"early stopping: {reached}", f"group early stopping: {reached}"
                )
            ]
        ops: list[Operation] = []
        while len(self.running) < self.hp.concurrency and self.started < self.planned:
            ops.append(self._ask())
        if not self.running and self.started >= self.planned:
            ok = [s for s in self.finished.values() if s in (TrialState.DONE, TrialState.PRUNED)]
            if not ok and self.finished:
                ops.append(Finish(GroupStatus.FAILED, "every trial failed"))
            else:
                ops.append(Finish(GroupStatus.SUCCEEDED, None))
        return ops

    def _ask(self) -> Launch:
        number = self.started
        self.study.sampler = _search.sampler_for(self.hp, self.seed, number)
        ot = self._orphan()
        if ot is None:
            ot = self.study.ask()
        values = _search.sample(ot, self.hp)  # an orphan's params are stored: the same values
        s = self.hp.search
        if s.resource and s.max_iter:
            values[s.resource] = int(s.max_iter) if s.resource_type == "int" else float(s.max_iter)
        self.started += 1
        self.claimed.add(ot.number)
        self.running[number] = _Running(number, ot)
        return Launch(number, values, {"params": dict(ot.params), "optuna_number": ot.number})

    def _orphan(self) -> Any | None:
        """An Optuna trial asked for by a controller killed before it recorded the trial: the next
        trial takes it (the same values an uninterrupted search proposes). One killed halfway
        through its sampling is failed and its values drawn again (seeded by number: the same)."""
        known = self.claimed | {r.optuna_trial.number for r in self.running.values()}
        names = {d.name for d in self.hp.matrix}
        op = _search.optuna()
        for frozen in self.study.get_trials(deepcopy=False, states=(op.trial.TrialState.RUNNING,)):
            if frozen.number in known:
                continue
            if set(frozen.params) >= names:
                return self._trial(frozen.number)
            self.study.tell(frozen.number, state=op.trial.TrialState.FAIL, skip_if_finished=True)
        return None

    # -- events ---------------------------------------------------------------------------------

    def stop(self, reason: str) -> list[Operation]:
        """`group stop`, Ctrl-C or SIGTERM: no new trial; the running ones are stopped."""
        self.stop_reason = reason
        return [StopGroup(GroupStatus.STOPPED, reason, reason)]

    def report(self, number: int, values: Mapping[int, float], *, ended: bool) -> list[Operation]:
        """Trial ``number`` reported these step -> value points of the metric (all it has so far;
        those already seen are skipped). Asked at every new step, not once per call: a rung compares
        the values at its own step however many steps arrived since. ``ended``: its experiment has
        already ended (no pruning then)."""
        run = self.running[number]
        for step in sorted(values):
            if step in run.reported:
                continue
            run.reported.add(step)
            run.last = (step, values[step])
            if run.pruned is not None or run.told:
                continue  # its outcome is decided: the value is only recorded
            run.optuna_trial.report(values[step], step)
            if self.hp.pruning is not None and not ended and run.optuna_trial.should_prune():
                run.pruned = Prune(number, step, values[step], self._prune_reason(step, values[step]))
                _search.tell(self.study, run.optuna_trial, state=_search.optuna().trial.TrialState.PRUNED)
                return [run.pruned]
        return []

    def last(self, number: int) -> tuple[int, float] | None:
        """The last (step, value) trial ``number`` reported of the metric."""
        return self.running[number].last

    def pruned(self, number: int) -> None:
        """The controller carried out a Prune: the trial's experiment is stopped."""
        self.running.pop(number)
        self.finished[number] = TrialState.PRUNED

    def ended(
        self,
        number: int,
        status: str,
        reason: str | None,
        finals: Mapping[str, float] | None = None,
    ) -> Outcome:
        """Trial ``number``'s experiment ended with ``status`` (succeeded, failed, stopped) and
        ``reason``. ``finals``: the last value of each early-stopping metric it reported."""
        op = _search.optuna()
        run = self.running.pop(number)
        step, value = run.last if run.last else (None, None)
        if status == "succeeded" and value is not None:
            _search.tell(self.study, run.optuna_trial, value)
            outcome = Outcome(number, TrialState.DONE, value, step, None)
            self.finals[number] = dict(finals or {})
        elif status == "succeeded":
            _search.tell(self.study, run.optuna_trial, state=op.trial.TrialState.FAIL)
            outcome = Outcome(number, TrialState.DONE, None, None, None, missing_metric=True)
            self.finals[number] = dict(finals or {})
        elif status == "stopped" and (reason or "").startswith("pruned at step"):
            # pruned by a controller that was killed before it recorded the decision
            _search.tell(self.study, run.optuna_trial, state=op.trial.TrialState.PRUNED)
            outcome = Outcome(number, TrialState.PRUNED, None, None, reason)
        else:
            _search.tell(self.study, run.optuna_trial, state=op.trial.TrialState.FAIL)
            outcome = Outcome(number, TrialState.FAILED, None, None, reason)
        self.finished[number] = outcome.state
        return outcome

    def launch_failed(self, number: int) -> None:
        """Trial ``number``'s experiment could not be started."""
        run = self.running.pop(number)
        _search.tell(self.study, run.optuna_trial, state=_search.optuna().trial.TrialState.FAIL)
        self.finished[number] = TrialState.FAILED

    def stopped(self, number: int, state: TrialState, value: float | None = None) -> None:
        """The group's stop ended trial ``number`` as ``state`` (stopped, failed; done with
        ``value`` when it had finished on its own meanwhile)."""
        run = self.running.pop(number)
        op = _search.optuna()
        if state is TrialState.DONE and value is not None:
            _search.tell(self.study, run.optuna_trial, value)
        else:
            _search.tell(self.study, run.optuna_trial, state=op.trial.TrialState.FAIL)
        self.finished[number] = state

    # -- deciding -------------------------------------------------------------------------------

    def early_stop_reached(self) -> str | None:
        """The first early-stopping rule a done trial's last value reaches, said as a reason."""
        for number in sorted(self.finals):
            for rule in self.hp.early_stopping:
                last = self.finals[number].get(rule.metric)
                if last is not None and math.isfinite(last) and rule.reached(last):
                    sign = ">=" if rule.optimization == "maximize" else "<="
                    return f"trial {number} reached {rule.metric} {last:.4g} {sign} {rule.value:g}"
        return None

    def _prune_reason(self, step: int, value: float) -> str:
        p = self.hp.pruning
        assert p is not None
        name = p.metric.name
        if p.kind == "median":
            op = _search.optuna()
            others = [
                t.intermediate_values[step]
                for t in self.study.get_trials(deepcopy=False, states=(op.trial.TrialState.COMPLETE,))
                if step in t.intermediate_values
            ]
            if others:
                sign = "<" if p.metric.maximize else ">"
                return (
                    f"pruned at step {step}: {name} {value:.4g} {sign} median {statistics.median(others):.4g}"
                )
            return f"pruned at step {step}: {name} {value:.4g}"
        how = p.kind.replace("_", " ")
        return (
            f"pruned at step {step}: {name} {value:.4g} not in the best 1/{p.reduction_factor}"
            f" of the trials at this rung ({how})"
        )


__all__ = ["Finish", "Launch", "Operation", "Outcome", "Prune", "Search", "StopGroup"]
