"""A group as `phalanx group get|ls -o json` and the API show it: its trials, the best one, each
sampled param's chart axis, and whether its controller runs. ``GroupStore.group_view`` and
``group_views`` are the capability (both doors: a server's ``RemoteStore`` asks ``/groups``), this
module the SQL store's side of it, as ``details`` is for an experiment's run."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Protocol

from phalanx.domain import (
    Experiment,
    ExperimentStatus,
    Group,
    Series,
    Trial,
    TrialState,
    best_trial,
    trial_counts,
)
from phalanx.errors import NotFound, PhalanxError
from phalanx.machine.procs import Seen, judge

LAST_FEW = 16  # points of a trial's metric read for its last value, before the whole series


class GroupRows(Protocol):
    """What a group's view reads of the store."""

    def list_trials(self, group_id: str) -> list[Trial]: ...

    def count_trials(self, group_id: str) -> int: ...

    def list_groups(self, limit: int = 50, projects: Sequence[str] | None = None) -> list[Group]: ...

    def get_experiment(self, experiment_id: str) -> Experiment: ...

    def metrics(
        self, experiment_id: str, title: str | None = None, series: str | None = None
    ) -> dict[str, dict[str, Series]]: ...

    def last_points(self, experiment_id: str, title: str, n: int) -> dict[str, Series]: ...


def controller_alive(group: Group) -> bool:
    """Whether the group's controller still runs (on this machine; another host's is trusted)."""
    if group.controller_pid is None or group.controller_pid == os.getpid():
        return False
    # no start time is recorded with a group's controller: its command line tells a reused pid apart
    seen = judge(group.controller_pid, None, group.controller_host, program=b"phalanx")
    return seen is not Seen.GONE


def group_json(store: GroupRows, group: Group) -> dict[str, Any]:
    """The group, its trials, the best one, ``axes``: each sampled param's chart axis ("log" or
    "linear") from its distribution, and ``controller_running``: whether its controller runs (a
    group neither ended nor created without one was orphaned: `phalanx group resume`)."""
    trials = [as_its_experiment_ended(store, group, t) for t in store.list_trials(group.id)]
    best = best_trial(trials, group.optimization)
    doc = group.to_json()
    doc["trials"] = [t.to_json() for t in trials]
    doc["best"] = best.to_json() if best else None
    doc["counts"] = trial_counts(trials)
    doc["axes"] = axes_of(group)
    doc["controller_running"] = controller_alive(group)
    return doc


def as_its_experiment_ended(store: GroupRows, group: Group, trial: Trial) -> Trial:
    """``trial`` as its experiment's record says, which is the truth: a trial row still `running` (or
    `launching`) whose experiment has ended is shown in the state its controller records once it
    sees the end (``groups.core.Search.ended``: succeeded, `done` with the metric's last value;
    stopped with a prune's reason, `pruned`; else `failed`), not `running` until `group stop|resume`
    when no controller watches it (killed) or while it has not yet written the row."""
    if trial.state.finished:
        return trial
    try:
        exp = store.get_experiment(trial.experiment_id)
    except NotFound:  # its launch has not created it yet
        return trial
    if not exp.status.done:
        return trial
    finished_at = exp.finished_at or trial.created_at
    if exp.status is ExperimentStatus.SUCCEEDED:
        last = last_point(store, trial.experiment_id, group.metric) if group.metric else None
        if last is None:
            why = f"succeeded without reporting {group.metric}" if group.metric else "no metric to compare"
            return replace(trial, state=TrialState.DONE, reason=why, finished_at=finished_at)
        step, value = last
        return replace(trial, state=TrialState.DONE, value=value, step=step, finished_at=finished_at)
    pruned = exp.status is ExperimentStatus.STOPPED and (exp.reason or "").startswith("pruned at step")
    state = TrialState.PRUNED if pruned else TrialState.FAILED
    return replace(trial, state=state, reason=exp.reason, finished_at=finished_at)


def last_point(store: GroupRows, experiment_id: str, metric: str) -> tuple[int, float] | None:
    """The last finite (step, value) of ``metric`` an experiment reported (its master's series, or
    the first by name); None when it reported none. Reads the last few points of the series (the
    group's page asks every 3 s), the whole series only when those are all NaN or infinite."""
    for whole in (False, True):
        try:
            found = (
                store.metrics(experiment_id, title=metric).get(metric, {})
                if whole
                else store.last_points(experiment_id, metric, LAST_FEW)
            )
        except NotFound:
            return None
        if not found:
            return None
        series = found["master" if "master" in found else sorted(found)[0]]
        points = [
            (int(st), float(v))
            for st, v in zip(series.steps, series.values, strict=False)
            if v is not None and math.isfinite(float(v))
        ]
        if points:
            return max(points)
    return None


def group_summaries(
    store: GroupRows, limit: int = 50, projects: Sequence[str] | None = None
) -> list[dict[str, Any]]:
    """The newest ``limit`` groups (of ``projects``; None: any), each with how many trials it has
    started and whether its controller runs."""
    return [
        {**g.to_json(), "trials": store.count_trials(g.id), "controller_running": controller_alive(g)}
        for g in store.list_groups(limit=limit, projects=projects)
    ]


def axes_of(group: Group) -> dict[str, str]:
    """param -> "log" / "linear" from the group's matrix (its stored file); {} when it cannot be read."""
    from phalanx.spec.group import recorded_group_spec  # why: every store imports this module

    try:
        spec = recorded_group_spec(group)
    except PhalanxError:  # a file an older Phalanx accepted: the chart guesses from the values
        return {}
    return {d.name: d.axis for d in spec.hptuning.matrix if d.axis is not None}
