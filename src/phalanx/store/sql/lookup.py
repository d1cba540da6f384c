"""Finding an experiment by what a user typed, and turning rows into the domain's dataclasses:
what every part of the SQL store needs and none of them owns."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, select

from phalanx.domain import Experiment, ExperimentStatus, Replica, ReplicaState, Role
from phalanx.errors import NotFound, UsageError
from phalanx.store.sql.models import ExperimentRow, GroupRow

# what an id (or a prefix of one) can be: never a LIKE wildcard
ID_PREFIX = re.compile(r"^[0-9a-z]{1,32}$")


def like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def resolve(conn: Connection, experiment_id: str, projects: Sequence[str] | None = None) -> str:
    """The full id ``experiment_id`` names. A prefix is matched only among ``projects``'
    experiments when given (a team server's caller: other projects' ids neither make it ambiguous
    nor are found by it); a full id is returned whatever its project (the caller's role decides)."""
    experiment_id = experiment_id.strip()
    if not experiment_id:
        raise UsageError("an experiment id is required")
    if any("\ud800" <= c <= "\udfff" for c in experiment_id):  # $'\xff' typed: in no id, and unbindable
        raise NotFound(f"no experiment {experiment_id!r}; `phalanx ls` lists them")
    if (
        conn.execute(select(ExperimentRow.c.id).where(ExperimentRow.c.id == experiment_id)).scalar()
        is not None
    ):
        return experiment_id
    if experiment_id.lower() != experiment_id:  # ids are lowercase hex; a copied id may not be
        return resolve(conn, experiment_id.lower(), projects)
    if ID_PREFIX.match(experiment_id):
        query = select(ExperimentRow.c.id).where(ExperimentRow.c.id.like(f"{experiment_id}%"))
        if projects is not None:
            query = query.where(ExperimentRow.c.project.in_(list(projects)))
        found = conn.execute(query.limit(5)).scalars().all()
        if len(found) == 1:
            return str(found[0])
        if len(found) > 1:
            raise UsageError(
                f"experiment id prefix {experiment_id!r} is ambiguous ({', '.join(sorted(found))}); "
                "type more characters"
            )
    if projects is not None:
        raise NotFound(
            f"experiment {experiment_id} does not exist (or is in a project you are not a member of)"
        )
    group = group_named(conn, experiment_id)
    if group is not None:  # a group's id given where an experiment's is wanted: say which is which
        gid, name = group
        raise NotFound(
            f"no experiment {experiment_id!r}: {gid} is an experiment group ({name}), not an experiment;"
            f" use `phalanx group get|stop|resume {gid}`, or `phalanx ls --group {gid}` for its trials"
        )
    raise NotFound(f"no experiment {experiment_id!r}; `phalanx ls` lists them")


def group_named(conn: Connection, text: str) -> tuple[str, str] | None:
    """The (id, name) of the one group whose id is or starts with ``text``, if any."""
    if not ID_PREFIX.match(text):
        return None
    found = conn.execute(
        select(GroupRow.c.id, GroupRow.c.name).where(GroupRow.c.id.like(f"{text}%")).limit(2)
    ).all()
    return (str(found[0][0]), str(found[0][1])) if len(found) == 1 else None


def experiment(m: Any) -> Experiment:
    return Experiment(
        id=m["id"],
        name=m["name"],
        project=m["project"],
        status=ExperimentStatus(m["status"]),
        framework=m["framework"],
        backend=m["backend"],
        cluster=m["cluster"],
        tags=tuple(m["tags"] or ()),
        topology=dict(m["topology"] or {}),
        spec_text=m["spec_text"],
        plan=dict(m["plan"] or {}),
        reason=m["reason"],
        created_at=m["created_at"],
        started_at=m["started_at"],
        finished_at=m["finished_at"],
        handle=m["handle"],
        notes=m.get("notes"),
        group_id=m.get("group_id"),
        kind=m.get("kind") or "training",
    )


def replica(m: Any) -> Replica:
    return Replica(
        experiment_id=m["experiment_id"],
        name=m["name"],
        role=Role(m["role"]),
        index=m["index"],
        rank=m["rank"],
        state=ReplicaState(m["state"]),
        host=m["host"],
        pid=m["pid"],
        exit_code=m["exit_code"],
        reason=m["reason"],
        resources=dict(m["resources"] or {}),
        started_at=m["started_at"],
        finished_at=m["finished_at"],
    )
