"""Groups and trials in the store (tables ``groups`` and ``group_trials``, migration 0003_groups);
the rest of Phalanx reads and writes them through ``phalanx.groups.records``.

The controller writes a trial row, with the experiment id it is about to launch, before launching
it: a controller killed at any point is resumed without losing or repeating a trial.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from sqlalchemy import delete, func, insert, select, update

from phalanx.errors import NotFound, UsageError
from phalanx.store.sql.models import ExperimentRow, GroupRow, TrialRow
from phalanx.store.sql.store import SqlStore

GROUP_DONE = ("succeeded", "stopped", "failed")


@dataclass(frozen=True)
class Trial:
    group_id: str
    number: int
    experiment_id: str
    params: Mapping[str, Any]
    state: str  # launching, running, done, pruned, failed
    value: float | None = None
    step: int | None = None
    reason: str | None = None
    internal: Mapping[str, Any] = field(default_factory=dict)
    created_at: float = 0.0
    finished_at: float | None = None

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc.pop("internal")
        doc["params"] = dict(self.params)
        return doc


@dataclass(frozen=True)
class Group:
    id: str
    name: str
    project: str
    status: str  # created, running, succeeded, stopped, failed
    search: str
    planned: int
    concurrency: int
    metric: str | None
    optimization: str | None
    spec_text: str
    source_file: str | None
    workdir: str | None
    options: Mapping[str, Any]
    reason: str | None
    controller_pid: int | None
    controller_host: str | None
    stop_requested: bool
    created_at: float
    finished_at: float | None

    @property
    def done(self) -> bool:
        return self.status in GROUP_DONE

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc.pop("spec_text")
        doc["options"] = dict(self.options)
        return doc


def create_group(
    store: SqlStore,
    *,
    name: str,
    project: str,
    search: str,
    planned: int,
    concurrency: int,
    metric: str | None,
    optimization: str | None,
    spec_text: str,
    source_file: str | None,
    workdir: str | None,
    options: Mapping[str, Any],
) -> Group:
    gid = uuid.uuid4().hex[:12]
    with store._writer.begin() as conn:
        conn.execute(
            insert(GroupRow).values(
                id=gid,
                name=name,
                project=project,
                status="created",
                search=search,
                planned=planned,
                concurrency=concurrency,
                metric=metric,
                optimization=optimization,
                spec_text=spec_text,
                source_file=source_file,
                workdir=workdir,
                options=dict(options),
                reason=None,
                controller_pid=None,
                controller_host=None,
                stop_requested=0,
                created_at=time.time(),
                finished_at=None,
            )
        )
    return get_group(store, gid)


def _group(m: Any) -> Group:
    return Group(
        **{k: m[k] for k in Group.__dataclass_fields__ if k != "stop_requested"},
        stop_requested=bool(m["stop_requested"]),
    )


def resolve_group(store: SqlStore, group_id: str) -> str:
    gid = group_id.strip().lower()
    with store.engine.connect() as conn:
        found = conn.execute(select(GroupRow.id).where(GroupRow.id.like(f"{gid}%")).limit(2)).scalars().all()
    if not found or not gid:
        raise NotFound(f"no group {group_id!r}; `phalanx group ls` lists them")
    if len(found) > 1:
        raise UsageError(f"group id {group_id!r} is ambiguous; give more characters")
    return str(found[0])


def get_group(store: SqlStore, group_id: str) -> Group:
    gid = resolve_group(store, group_id)
    with store.engine.connect() as conn:
        row = conn.execute(select(GroupRow).where(GroupRow.id == gid)).one()
    return _group(row._mapping)


def list_groups(store: SqlStore, limit: int = 50) -> list[Group]:
    with store.engine.connect() as conn:
        rows = conn.execute(select(GroupRow).order_by(GroupRow.created_at.desc()).limit(limit)).all()
    return [_group(r._mapping) for r in rows]


def update_group(store: SqlStore, group_id: str, **values: Any) -> None:
    if "stop_requested" in values:
        values["stop_requested"] = int(bool(values["stop_requested"]))
    with store._writer.begin() as conn:
        conn.execute(update(GroupRow).where(GroupRow.id == group_id).values(**values))


def count_trials(store: SqlStore, group_id: str) -> int:
    with store.engine.connect() as conn:
        return int(
            conn.execute(
                select(func.count()).select_from(TrialRow).where(TrialRow.group_id == group_id)
            ).scalar_one()
        )


def add_trial(store: SqlStore, trial: Trial) -> None:
    """Record a trial before its experiment is launched (its id fixed here)."""
    with store._writer.begin() as conn:
        conn.execute(
            insert(TrialRow).values(
                group_id=trial.group_id,
                number=trial.number,
                experiment_id=trial.experiment_id,
                params=dict(trial.params),
                internal=dict(trial.internal),
                state=trial.state,
                value=trial.value,
                step=trial.step,
                reason=trial.reason,
                created_at=time.time(),
                finished_at=None,
            )
        )


def update_trial(store: SqlStore, group_id: str, number: int, **values: Any) -> None:
    with store._writer.begin() as conn:
        conn.execute(
            update(TrialRow).where(TrialRow.group_id == group_id, TrialRow.number == number).values(**values)
        )


def list_trials(store: SqlStore, group_id: str) -> list[Trial]:
    with store.engine.connect() as conn:
        rows = conn.execute(
            select(TrialRow).where(TrialRow.group_id == group_id).order_by(TrialRow.number)
        ).all()
    return [Trial(**{k: r._mapping[k] for k in Trial.__dataclass_fields__}) for r in rows]


def link_experiment(store: SqlStore, experiment_id: str, group_id: str) -> None:
    """experiments.group_id: `phalanx ls --group ID` and the API find a group's trials by it."""
    with store._writer.begin() as conn:
        conn.execute(update(ExperimentRow).where(ExperimentRow.id == experiment_id).values(group_id=group_id))


def delete_group(store: SqlStore, group_id: str) -> None:
    with store._writer.begin() as conn:
        conn.execute(delete(TrialRow).where(TrialRow.group_id == group_id))
        conn.execute(delete(GroupRow).where(GroupRow.id == group_id))


def best_trial(trials: list[Trial], optimization: str | None) -> Trial | None:
    """The finished (not pruned) trial with the best metric value."""
    scored = [t for t in trials if t.state == "done" and t.value is not None]
    if not scored:
        return None
    pick = max if optimization == "maximize" else min
    return pick(scored, key=lambda t: t.value)  # type: ignore[arg-type,return-value]


def sql_store(store: object) -> SqlStore:
    """The SQL store groups keep their tables in (migration 0003_groups): SQLite or PostgreSQL.
    Group records are not on the Store protocol yet; another store is told so plainly."""
    if not isinstance(store, SqlStore):
        from phalanx.errors import UsageError

        raise UsageError(
            f"experiment groups need the SQL store (SQLite or PostgreSQL), not {type(store).__name__}"
        )
    return store


# Storage errors leave these functions as Phalanx errors, as they leave SqlStore (errors.py).
def _translate_errors() -> None:
    from phalanx.store.sql.errors import translate_module

    translate_module(globals())


_translate_errors()
