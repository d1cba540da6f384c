"""A group as `phalanx group get|ls -o json` and the API show it: its trials, the best one, each
sampled param's chart axis, and whether its controller runs. ``GroupStore.group_view`` and
``group_views`` are the capability (both doors: a server's ``RemoteStore`` asks ``/groups``), this
module the SQL store's side of it, as ``details`` is for an experiment's run."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Protocol

from phalanx.domain import Group, Trial, best_trial, trial_counts
from phalanx.errors import PhalanxError
from phalanx.machine.procs import Seen, judge
from phalanx.spec.group import recorded_group_spec


class GroupRows(Protocol):
    """What a group's view reads of the store."""

    def list_trials(self, group_id: str) -> list[Trial]: ...

    def count_trials(self, group_id: str) -> int: ...

    def list_groups(self, limit: int = 50, projects: Sequence[str] | None = None) -> list[Group]: ...


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
    trials = store.list_trials(group.id)
    best = best_trial(trials, group.optimization)
    doc = group.to_json()
    doc["trials"] = [t.to_json() for t in trials]
    doc["best"] = best.to_json() if best else None
    doc["counts"] = trial_counts(trials)
    doc["axes"] = axes_of(group)
    doc["controller_running"] = controller_alive(group)
    return doc


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
    try:
        spec = recorded_group_spec(group)
    except PhalanxError:  # a file an older Phalanx accepted: the chart guesses from the values
        return {}
    return {d.name: d.axis for d in spec.hptuning.matrix if d.axis is not None}
