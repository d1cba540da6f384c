"""Groups and trials in the SQL store (tables ``groups`` and ``group_trials``, migration 0003_groups):
the SQL behind ``SqlStore``'s ``base.GroupStore`` methods (documented there). Callers never import
this module: they call the store's methods, which also turn storage errors into Phalanx errors
(``errors.phalanx_errors``).

The controller writes a trial row, with the experiment id it is about to launch, before launching
it: a controller killed at any point is resumed without losing or repeating a trial. A group's end
queues its alert hooks' deliveries (``group.finished``) in the transaction that records it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Unpack

from sqlalchemy import Engine, delete, func, insert, or_, select, update

from phalanx.domain import Group, GroupStatus, GroupUpdate, Trial, TrialUpdate
from phalanx.errors import Conflict, NotFound, UsageError
from phalanx.ids import new_id
from phalanx.store import group_views
from phalanx.store.sql import alerts, deletion
from phalanx.store.sql.errors import phalanx_errors
from phalanx.store.sql.lookup import ID_PREFIX
from phalanx.store.sql.models import ExperimentRow, GroupRow, TrialRow
from phalanx.store.sql.trials import trials_of

if TYPE_CHECKING:
    from phalanx.domain import Experiment, Series
    from phalanx.store.artifacts import ArtifactStore


def create_group(store: GroupBook, fields: Mapping[str, Any]) -> Group:
    """``fields``: what ``GroupStore.create_group`` takes (name, project, search, ... options)."""
    gid = new_id()
    with store._writer.begin() as conn:
        conn.execute(
            insert(GroupRow).values(
                {
                    **fields,
                    "options": dict(fields["options"]),
                    "id": gid,
                    "status": "created",
                    "reason": None,
                    "controller_pid": None,
                    "controller_host": None,
                    "stop_requested": 0,
                    "created_at": time.time(),
                    "finished_at": None,
                }
            )
        )
    return get_group(store, gid)


def _group(m: Any) -> Group:
    return Group(
        **{k: m[k] for k in Group.__dataclass_fields__ if k != "stop_requested"},
        stop_requested=bool(m["stop_requested"]),
    )


def _experiment_hint(store: GroupBook, text: str) -> str:
    """An experiment's id given where a group's is wanted (`phalanx group get TRIAL`): say what it is."""
    if not ID_PREFIX.match(text):
        return ""
    with store.engine.connect() as conn:
        found = conn.execute(
            select(ExperimentRow.c.id, ExperimentRow.c.group_id)
            .where(ExperimentRow.c.id.like(f"{text}%"))
            .limit(2)
        ).all()
    if len(found) != 1:
        return ""
    eid, gid = found[0]
    if gid:
        return f": {eid} is an experiment, a trial of group {gid} (`phalanx group get {gid}`)"
    return f": {eid} is an experiment, not a group (`phalanx get {eid}`)"


def resolve_group(store: GroupBook, group_id: str, projects: Sequence[str] | None = None) -> str:
    gid = group_id.strip().lower()
    query = select(GroupRow.c.id).where(GroupRow.c.id.like(f"{gid}%"))
    if projects is not None:  # other projects' groups neither match nor make a prefix ambiguous
        query = query.where(GroupRow.c.project.in_(list(projects)))
    found: Sequence[str] = []
    if ID_PREFIX.match(gid):  # `%` or `_` would be a LIKE wildcard: no id holds one
        with store.engine.connect() as conn:
            found = conn.execute(query.limit(2)).scalars().all()
    if (not found or not gid) and projects is not None:
        raise NotFound(f"group {group_id} does not exist (or is in a project you are not a member of)")
    if not found or not gid:
        hint = _experiment_hint(store, gid)
        raise NotFound(f"no group {group_id!r}{hint or '; `phalanx group ls` lists them'}")
    if len(found) > 1:
        raise UsageError(f"group id {group_id!r} is ambiguous; give more characters")
    return str(found[0])


def get_group(store: GroupBook, group_id: str) -> Group:
    gid = resolve_group(store, group_id)
    with store.engine.connect() as conn:
        row = conn.execute(select(GroupRow).where(GroupRow.c.id == gid)).one()
    return _group(row._mapping)


def list_groups(store: GroupBook, limit: int = 50, projects: Sequence[str] | None = None) -> list[Group]:
    query = select(GroupRow).order_by(GroupRow.c.created_at.desc())
    if projects is not None:
        query = query.where(GroupRow.c.project.in_(list(projects)))
    with store.engine.connect() as conn:
        rows = conn.execute(query.limit(limit)).all()
    return [_group(r._mapping) for r in rows]


def update_group(store: GroupBook, group_id: str, values: Mapping[str, Any]) -> None:
    """A group's end (a status that is one) is written with the deliveries of its project's alert
    hooks, in one transaction (``alerts.record_group_end``)."""
    changes = dict(values)
    if "stop_requested" in changes:
        changes["stop_requested"] = int(bool(changes["stop_requested"]))
    ends = "status" in changes and GroupStatus(changes["status"]).done
    with store._writer.begin() as conn:
        before = None
        if ends:  # locked (PostgreSQL; SQLite's writer holds the database): two ends, one event
            before = conn.execute(
                select(GroupRow.c.status).where(GroupRow.c.id == group_id).with_for_update()
            ).scalar()
        conn.execute(update(GroupRow).where(GroupRow.c.id == group_id).values(**changes))
        if ends:
            alerts.record_group_end(conn, group_id, before, str(changes["status"]))


def count_trials(store: GroupBook, group_id: str) -> int:
    with store.engine.connect() as conn:
        return int(
            conn.execute(
                select(func.count()).select_from(TrialRow).where(TrialRow.c.group_id == group_id)
            ).scalar_one()
        )


def add_trial(store: GroupBook, trial: Trial) -> None:
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


def update_trial(store: GroupBook, group_id: str, number: int, values: Mapping[str, Any]) -> None:
    changes = dict(values)
    if "internal" in changes:
        changes["internal"] = dict(changes["internal"])
    with store._writer.begin() as conn:
        conn.execute(
            update(TrialRow)
            .where(TrialRow.c.group_id == group_id, TrialRow.c.number == number)
            .values(**changes)
        )


def list_trials(store: GroupBook, group_id: str) -> list[Trial]:
    with store.engine.connect() as conn:
        return trials_of(conn, group_id)


def link_experiment(store: GroupBook, experiment_id: str, group_id: str) -> None:
    with store._writer.begin() as conn:
        conn.execute(
            update(ExperimentRow).where(ExperimentRow.c.id == experiment_id).values(group_id=group_id)
        )


def remove_group(store: GroupBook, group_id: str) -> list[str]:
    gid = resolve_group(store, group_id)
    with store._writer.begin() as conn:
        status, project = conn.execute(
            select(GroupRow.c.status, GroupRow.c.project).where(GroupRow.c.id == gid)
        ).one()
        if not GroupStatus(status).done:
            raise Conflict(
                f"group {gid} is {status}; stop it before deleting it (`phalanx group stop {gid}`);"
                " nothing was deleted"
            )
        # its trials' experiments of its own project: an id a trial recorded whose launch never made
        # the row may have been taken since by an experiment of another project (ingest names ids)
        trials = select(TrialRow.c.experiment_id).where(TrialRow.c.group_id == gid)
        mine = select(ExperimentRow.c.id).where(
            ExperimentRow.c.project == project,
            or_(ExperimentRow.c.group_id == gid, ExperimentRow.c.id.in_(trials)),
        )
        ids = sorted(conn.execute(mine).scalars())
        deletion.delete_experiments(conn, ids)
        conn.execute(delete(TrialRow).where(TrialRow.c.group_id == gid))
        conn.execute(delete(GroupRow).where(GroupRow.c.id == gid))
    if store.artifact_store is not None:
        for experiment_id in ids:
            store.artifact_store.delete_experiment(experiment_id)
    return ids


@phalanx_errors
class GroupBook:
    """SqlStore's ``base.GroupStore`` methods (its base class): each is the function above."""

    engine: Engine
    _writer: Engine
    artifact_store: ArtifactStore | None

    if TYPE_CHECKING:  # SqlStore's own (its subclass): a group's view reads its trials' experiments

        def get_experiment(self, experiment_id: str) -> Experiment: ...

        def metrics(
            self, experiment_id: str, title: str | None = None, series: str | None = None
        ) -> dict[str, dict[str, Series]]: ...

        def last_points(self, experiment_id: str, title: str, n: int) -> dict[str, Series]: ...

    def create_group(
        self,
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
        return create_group(
            self,
            {
                "name": name,
                "project": project,
                "search": search,
                "planned": planned,
                "concurrency": concurrency,
                "metric": metric,
                "optimization": optimization,
                "spec_text": spec_text,
                "source_file": source_file,
                "workdir": workdir,
                "options": options,
            },
        )

    def resolve_group(self, group_id: str, projects: Sequence[str] | None = None) -> str:
        return resolve_group(self, group_id, projects)

    def get_group(self, group_id: str) -> Group:
        return get_group(self, group_id)

    def list_groups(self, limit: int = 50, projects: Sequence[str] | None = None) -> list[Group]:
        return list_groups(self, limit, projects)

    def update_group(self, group_id: str, **values: Unpack[GroupUpdate]) -> None:
        update_group(self, group_id, values)

    def remove_group(self, group_id: str) -> list[str]:
        return remove_group(self, group_id)

    def add_trial(self, trial: Trial) -> None:
        add_trial(self, trial)

    def update_trial(self, group_id: str, number: int, **values: Unpack[TrialUpdate]) -> None:
        update_trial(self, group_id, number, values)

    def list_trials(self, group_id: str) -> list[Trial]:
        return list_trials(self, group_id)

    def group_view(self, group_id: str) -> dict[str, Any]:
        return group_views.group_json(self, get_group(self, group_id))

    def group_views(self, limit: int = 50, projects: Sequence[str] | None = None) -> list[dict[str, Any]]:
        return group_views.group_summaries(self, limit, projects)

    def count_trials(self, group_id: str) -> int:
        return count_trials(self, group_id)

    def link_experiment(self, experiment_id: str, group_id: str) -> None:
        link_experiment(self, experiment_id, group_id)
