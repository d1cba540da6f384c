"""The values of an experiment's and a replica's rows as every door writes them (the full store,
``store.sql``, and a supervisor's lean writer, ``store.lite_writer``): the names checked, the columns
a change sets. Standard library only; JSON columns are left as Python values for each door to bind."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from phalanx.domain import ExperimentStatus, Replica, ReplicaState, Role
from phalanx.errors import UsageError
from phalanx.tracking.labels import MAX_NAME, MAX_TAG, label_problem


def check_labels(name: str, project: str, tags: Sequence[str]) -> None:
    """The last gate for names (files, Task.init and the API check them first, with positions)."""
    for value, what, most in (
        (name, "name", MAX_NAME),
        (project, "project", MAX_NAME),
        *((t, "tag", MAX_TAG) for t in tags),
    ):
        if value.strip() and (problem := label_problem(value, what, most)):
            raise UsageError(problem)


def experiment_changes(
    *,
    status: ExperimentStatus | None,
    reason: str | None,
    started_at: float | None,
    finished_at: float | None,
    handle: str | None,
    cluster: str | None,
    plan: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The columns ``update_experiment`` sets: those given (None: left as they are)."""
    given = {
        "status": None if status is None else ExperimentStatus(status).value,
        "reason": reason,
        "started_at": started_at,
        "finished_at": finished_at,
        "handle": handle,
        "cluster": cluster,
        "plan": None if plan is None else dict(plan),
    }
    return {k: v for k, v in given.items() if v is not None}


def replica_changes(
    *,
    state: ReplicaState | None,
    host: str | None,
    pid: int | None,
    exit_code: int | None,
    reason: str | None,
    started_at: float | None,
    finished_at: float | None,
    fresh: bool,
) -> dict[str, Any]:
    """The columns ``update_replica`` sets: those given; ``fresh`` (a new attempt of the replica)
    also clears what the last one ended with."""
    given = {
        "state": None if state is None else ReplicaState(state).value,
        "host": host,
        "pid": pid,
        "exit_code": exit_code,
        "reason": reason,
        "started_at": started_at,
        "finished_at": finished_at,
    }
    values: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
    if fresh:
        for column in ("exit_code", "reason", "finished_at"):
            values.setdefault(column, None)
    return values


def replica_values(experiment_id: str, r: Replica) -> dict[str, Any]:
    """A replica's row, column by column."""
    return {
        "experiment_id": experiment_id,
        "name": r.name,
        "role": Role(r.role).value,
        "index": r.index,
        "rank": r.rank,
        "state": ReplicaState(r.state).value,
        "host": r.host,
        "pid": r.pid,
        "exit_code": r.exit_code,
        "reason": r.reason,
        "resources": dict(r.resources),
        "started_at": r.started_at,
        "finished_at": r.finished_at,
    }
