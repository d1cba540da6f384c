"""The alert tables (``alert_rows``): a project's hooks, the outbox of their deliveries and each
delivery's attempts. ``record_end`` is called by the store's status writers in the transaction that
records an experiment's end, ``notice`` writes what a supervisor noticed with its deliveries,
``record_group_end`` is called by ``sql.groups`` in the transaction that records a group's end,
``record_alias_moved`` by ``sql.registry`` in the one that points a model's alias at another
version; ``SqlAlerts`` answers ``store.alerts.AlertBook`` and ``Outbox``."""

from __future__ import annotations

import json
import secrets
import time
import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, Engine, Row, delete, insert, select, update

from phalanx.domain import ExperimentStatus, GroupStatus, ReplicaState, best_trial, trial_counts
from phalanx.errors import NotFound, UsageError
from phalanx.ids import random_hex
from phalanx.store.alert_records import (
    EXPERIMENT_ENDS,
    GROUP_FINISHED,
    MODEL_ALIAS,
    Attempt,
    Delivery,
    Due,
    Hook,
    check_hook,
    check_hook_id,
)
from phalanx.store.notice_kinds import NOTICES, STALLED
from phalanx.store.sql.alert_rows import AlertAttemptRow, AlertDeliveryRow, AlertHookRow
from phalanx.store.sql.engine import writer
from phalanx.store.sql.models import ExperimentRow, GroupRow, RegisteredModelRow, ReplicaRow
from phalanx.store.sql.trials import trials_of

PENDING, DELIVERED, FAILED, DROPPED = "pending", "delivered", "failed", "dropped"


def record_end(conn: Connection, experiment_id: str, before: str | None, after: str) -> None:
    """Queue a delivery for each of the project's hooks told about ``after``, when this write ends
    the experiment (``before`` was not an end: an end written again queues nothing). In the
    caller's transaction, after the experiment's row (and its replicas', as far as they are)
    were written."""
    if after not in EXPERIMENT_ENDS or (before is not None and ExperimentStatus(before).done):
        return
    project = select(ExperimentRow.c.project).where(ExperimentRow.c.id == experiment_id).scalar_subquery()
    told = _told(conn, project, after)
    if told:
        payload = _payload(conn, experiment_id, after)
        _queue(conn, told, payload, experiment_id=experiment_id)


def notice(conn: Connection, experiment_id: str, kind: str, replica: str | None, text: str) -> None:
    """An ``experiment.KIND`` delivery (``kind``: one of NOTICES) naming ``replica`` (None: the
    experiment as a whole) for each of its project's hooks told about it, in the caller's
    transaction; a stall's ``text`` is also the experiment's reason while it lasts."""
    if kind not in NOTICES:
        raise UsageError(f"notice {kind!r}: give one of {', '.join(NOTICES)}")
    if kind == STALLED:
        conn.execute(update(ExperimentRow).where(ExperimentRow.c.id == experiment_id).values(reason=text))
    exp = conn.execute(
        select(ExperimentRow.c.project, ExperimentRow.c.name).where(ExperimentRow.c.id == experiment_id)
    ).one()
    told = _told(conn, exp.project, kind)
    if told:
        payload = {
            "event": f"experiment.{kind}",
            "project": exp.project,
            "experiment_id": experiment_id,
            "name": exp.name,
            "status": kind,
            "reason": text.removeprefix(f"{kind}: "),  # the reason says "stalled: ..." where it stands alone
            "replica": replica,
            "noticed_at": time.time(),
        }
        _queue(conn, told, payload, experiment_id=experiment_id)


def record_group_end(conn: Connection, group_id: str, before: str | None, after: str) -> None:
    """Queue a ``group.finished`` delivery for each of the group's project's hooks told about it,
    when this write ends the group (``before``, its status read in this transaction before the
    write, was no end: an end written again queues nothing; None: there is no such group). In
    the caller's transaction, after the group's row was written; its trials were recorded before
    (the controller records each trial's end, then the group's)."""
    if before is None or GroupStatus(before).done or not GroupStatus(after).done:
        return
    group = conn.execute(select(GroupRow).where(GroupRow.c.id == group_id)).one()
    told = _told(conn, group.project, GROUP_FINISHED)
    if told:
        _queue(conn, told, _group_payload(conn, group), group_id=group_id)


def record_alias_moved(conn: Connection, name: str, alias: str, before: int | None, after: int) -> None:
    """Queue a ``model.alias`` delivery for each hook of the model's project told about it, when
    ``name@alias`` now points at ``after`` and pointed elsewhere (``before``; None: it is new). In
    the caller's transaction, after the alias's row was written: an alias set again to the version
    it already names queues nothing."""
    if before == after:
        return
    project = conn.execute(
        select(RegisteredModelRow.c.project).where(RegisteredModelRow.c.name == name)
    ).scalar_one()
    told = _told(conn, project, MODEL_ALIAS)
    if told:
        payload = {
            "event": MODEL_ALIAS,
            "project": project,
            "model": name,
            "alias": alias,
            "version": after,
            "previous": before,
            "moved_at": time.time(),
        }
        _queue(conn, told, payload, model=name)


def _told(conn: Connection, project: Any, event: str) -> list[str]:
    """The ids of ``project``'s hooks that asked for ``event`` (as a hook keeps it)."""
    hooks = conn.execute(
        select(AlertHookRow.c.id, AlertHookRow.c.events).where(AlertHookRow.c.project == project)
    ).all()
    return [hook_id for hook_id, events in hooks if event in events.split(",")]


def _queue(
    conn: Connection,
    told: Sequence[str],
    payload: dict[str, Any],
    experiment_id: str | None = None,
    group_id: str | None = None,
    model: str | None = None,
) -> None:
    """One pending delivery of ``payload`` to each hook in ``told``, about its one subject."""
    body, now = json.dumps(payload, sort_keys=True), time.time()
    conn.execute(
        insert(AlertDeliveryRow),
        [
            {
                "id": str(uuid.uuid4()),
                "hook_id": hook_id,
                "experiment_id": experiment_id,
                "group_id": group_id,
                "model": model,
                "event": payload["event"],
                "payload": body,
                "state": PENDING,
                "attempts": 0,
                "next_at": now,
                "created_at": now,
                "finished_at": None,
            }
            for hook_id in told
        ],
    )


def _group_payload(conn: Connection, group: Row[Any]) -> dict[str, Any]:
    """What a group's hooks are told: the group, its trials counted by state (``counts``), and its
    best trial as `phalanx group get -o json` shows it (``domain.best_trial`` under the group's own
    optimization), with the metric's name."""
    trials = trials_of(conn, group.id)
    best = best_trial(trials, group.optimization)
    return {
        "event": GROUP_FINISHED,
        "project": group.project,
        "group_id": group.id,
        "name": group.name,
        "status": group.status,
        "reason": group.reason,
        "search": group.search,
        "planned": group.planned,
        "counts": trial_counts(trials),
        "best": None if best is None else best.to_json() | {"metric": group.metric},
        "finished_at": group.finished_at,
    }


def _payload(conn: Connection, experiment_id: str, status: str) -> dict[str, Any]:
    """What the receiver is told, as the rows hold it now; a failure's reason is its failing
    replica's own (the first to fail), else the experiment's."""
    exp = conn.execute(
        select(
            ExperimentRow.c.project, ExperimentRow.c.name, ExperimentRow.c.reason, ExperimentRow.c.finished_at
        ).where(ExperimentRow.c.id == experiment_id)
    ).one()
    failing = None
    if status == ExperimentStatus.FAILED.value:
        failing = conn.execute(
            select(ReplicaRow.c.name, ReplicaRow.c.reason)
            .where(
                ReplicaRow.c.experiment_id == experiment_id, ReplicaRow.c.state == ReplicaState.FAILED.value
            )
            .order_by(ReplicaRow.c.finished_at, ReplicaRow.c.name)
            .limit(1)
        ).first()
    reason = (failing.reason if failing is not None else None) or exp.reason
    return {
        "event": f"experiment.{status}",
        "project": exp.project,
        "experiment_id": experiment_id,
        "name": exp.name,
        "status": status,
        "reason": reason,
        "replica": None if failing is None else failing.name,
        "finished_at": exp.finished_at,
    }


class SqlAlerts:
    """The alert tables of one SQL store's engine."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def add_hook(
        self, project: str, url: str, events: Sequence[str], secret: str | None, created_by: str | None
    ) -> Hook:
        chosen = check_hook(project, url, events, secret)
        hook = Hook(
            id=f"h{random_hex(11)}",
            project=project,
            url=url,
            events=chosen,
            created_by=created_by,
            created_at=time.time(),
            secret=secret or secrets.token_hex(32),
        )
        with writer(self.engine).begin() as conn:
            values = hook.to_json() | {"events": ",".join(chosen)}
            conn.execute(insert(AlertHookRow).values(**values))
        return hook

    def hooks(self, projects: Sequence[str] | None = None) -> list[Hook]:
        query = select(AlertHookRow).order_by(AlertHookRow.c.created_at, AlertHookRow.c.id)
        if projects is not None:
            query = query.where(AlertHookRow.c.project.in_(list(projects)))
        with self.engine.connect() as conn:
            return [_hook(row) for row in conn.execute(query).all()]

    def hook(self, hook_id: str) -> Hook:
        with self.engine.connect() as conn:
            return _hook(_hook_row(conn, hook_id))

    def remove_hook(self, hook_id: str) -> None:
        with writer(self.engine).begin() as conn:
            _hook_row(conn, hook_id)
            conn.execute(delete(AlertHookRow).where(AlertHookRow.c.id == hook_id))
            conn.execute(
                update(AlertDeliveryRow)
                .where(AlertDeliveryRow.c.hook_id == hook_id, AlertDeliveryRow.c.state == PENDING)
                .values(state=DROPPED, finished_at=time.time())
            )

    def deliveries(self, hook_id: str, limit: int = 50) -> list[Delivery]:
        with self.engine.connect() as conn:
            _hook_row(conn, hook_id)
            rows = conn.execute(
                select(AlertDeliveryRow)
                .where(AlertDeliveryRow.c.hook_id == hook_id)
                .order_by(AlertDeliveryRow.c.created_at.desc(), AlertDeliveryRow.c.id)
                .limit(limit)
            ).all()
            tries: dict[str, list[Attempt]] = {r.id: [] for r in rows}
            found = conn.execute(
                select(AlertAttemptRow)
                .where(AlertAttemptRow.c.delivery_id.in_(list(tries)))
                .order_by(AlertAttemptRow.c.number)
            ).all()
            for a in found:
                tries[a.delivery_id].append(Attempt(a.number, a.at, a.status_code, a.error))
        return [
            Delivery(
                r.id,
                r.hook_id,
                r.experiment_id,
                r.event,
                r.state,
                r.created_at,
                r.finished_at,
                tuple(tries[r.id]),
                group_id=r.group_id,
                model=r.model,
            )
            for r in rows
        ]

    def claim_due(self, now: float, lease: float, limit: int = 20) -> list[Due]:
        query = (
            select(AlertDeliveryRow, AlertHookRow.c.url, AlertHookRow.c.secret)
            .join(AlertHookRow, AlertHookRow.c.id == AlertDeliveryRow.c.hook_id)
            .where(AlertDeliveryRow.c.state == PENDING, AlertDeliveryRow.c.next_at <= now)
            .order_by(AlertDeliveryRow.c.next_at)
            .limit(limit)
        )
        claimed = []
        with writer(self.engine).begin() as conn:
            for row in conn.execute(query).all():
                # another deliverer on this database that read the same row first has moved next_at
                taken = conn.execute(
                    update(AlertDeliveryRow)
                    .where(AlertDeliveryRow.c.id == row.id, AlertDeliveryRow.c.next_at == row.next_at)
                    .values(next_at=now + lease)
                )
                if taken.rowcount:
                    claimed.append(Due(row.id, row.url, row.secret, row.event, row.payload, row.attempts))
        return claimed

    def record_attempt(
        self, delivery_id: str, at: float, status_code: int | None, error: str | None, next_at: float | None
    ) -> None:
        delivered = status_code is not None and 200 <= status_code < 300
        with writer(self.engine).begin() as conn:
            number = (
                conn.execute(
                    select(AlertDeliveryRow.c.attempts).where(AlertDeliveryRow.c.id == delivery_id)
                ).scalar_one()
                + 1
            )
            conn.execute(
                insert(AlertAttemptRow).values(
                    delivery_id=delivery_id, number=number, at=at, status_code=status_code, error=error
                )
            )
            state = DELIVERED if delivered else PENDING if next_at is not None else FAILED
            values: dict[str, Any] = {"attempts": number, "state": state}
            if state == PENDING:
                values["next_at"] = next_at
            else:
                values["finished_at"] = at
            conn.execute(
                update(AlertDeliveryRow).where(AlertDeliveryRow.c.id == delivery_id).values(**values)
            )


def _hook_row(conn: Connection, hook_id: str) -> Row[Any]:
    check_hook_id(hook_id)
    row = conn.execute(select(AlertHookRow).where(AlertHookRow.c.id == hook_id)).first()
    if row is None:
        raise NotFound(f"alert hook {hook_id} does not exist (`phalanx alert ls` lists them)")
    return row


def _hook(row: Row[Any]) -> Hook:
    return Hook(row.id, row.project, row.url, tuple(row.events.split(",")), row.created_by, row.created_at)
