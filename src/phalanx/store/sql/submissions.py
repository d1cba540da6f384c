"""The submissions table (``store.submissions.SubmissionStore`` on SQL).

``accept`` is the control plane's one durable step: the submission, its experiment (with its
replicas) or group row, who launched it and its audit entry go in one transaction, after the
request was validated and authorized and before it is answered. The unique constraint on (user,
key) arbitrates two submits racing with one key: one inserts, the other reads the winner and is
answered the winner's id (same fingerprint) or refused (another fingerprint).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Engine, insert, or_, select, update
from sqlalchemy.exc import IntegrityError

from phalanx.domain import GroupStatus
from phalanx.errors import Conflict
from phalanx.store.row_values import replica_values
from phalanx.store.sql.errors import phalanx_errors
from phalanx.store.sql.models import (
    AuditRow,
    ExperimentRow,
    GroupRow,
    LaunchRow,
    ReplicaRow,
    SubmissionRow,
)
from phalanx.store.submissions import (
    Acceptance,
    NewExperiment,
    NewGroup,
    Submission,
    SubmissionKind,
    SubmissionState,
    key_conflict,
)

_COLUMNS = (
    SubmissionRow.c.experiment_id,
    SubmissionRow.c.kind,
    SubmissionRow.c.bundle_sha256,
    SubmissionRow.c.submitted_at,
    SubmissionRow.c.state,
    SubmissionRow.c.user,
    SubmissionRow.c.idempotency_key,
    SubmissionRow.c.fingerprint,
)


def _submission(row: Any) -> Submission:
    return Submission(
        id=str(row[0]),
        kind=SubmissionKind(row[1]),
        bundle_sha256=str(row[2]),
        submitted_at=float(row[3]),
        state=SubmissionState(row[4]),
        user=row[5],
        key=row[6],
        fingerprint=row[7],
    )


@phalanx_errors
class SubmissionBook:
    """SqlStore's ``SubmissionStore`` methods (its base class)."""

    engine: Engine
    _writer: Engine

    def accept(self, acceptance: Acceptance, now: float) -> tuple[Submission, bool]:
        sub = acceptance.submission
        try:
            with self._writer.begin() as conn:
                if sub.key is not None and sub.user is not None:
                    held = _held(conn, sub.user, sub.key, now)
                    if held is not None:
                        return _replayed(held, sub), False
                    _expire(conn, sub.user, sub.key)
                _insert(conn, acceptance, now)
            return sub, True
        except IntegrityError:
            if sub.key is None or sub.user is None:
                raise
        # another submit with this key won the race between our read and our insert
        found = self.submission_by_key(sub.user, sub.key, now)
        if found is None:  # it expired meanwhile: rare enough to let the client retry
            raise Conflict(f"Idempotency-Key {sub.key!r} changed hands while this submit ran; send it again")
        return _replayed(found, sub), False

    def submission(self, submission_id: str) -> Submission | None:
        with self.engine.connect() as conn:
            row = conn.execute(
                select(*_COLUMNS).where(SubmissionRow.c.experiment_id == submission_id)
            ).first()
        return None if row is None else _submission(row)

    def submission_by_key(self, user: str, key: str, now: float) -> Submission | None:
        with self.engine.connect() as conn:
            return _held(conn, user, key, now)

    def submissions(self, state: SubmissionState) -> list[Submission]:
        query = (
            select(*_COLUMNS)
            .where(SubmissionRow.c.state == state.value)
            .order_by(SubmissionRow.c.submitted_at)
        )
        with self.engine.connect() as conn:
            return [_submission(row) for row in conn.execute(query)]

    def mark_launched(self, submission_id: str) -> None:
        with self._writer.begin() as conn:
            conn.execute(
                update(SubmissionRow)
                .where(SubmissionRow.c.experiment_id == submission_id)
                .values(state=SubmissionState.LAUNCHED.value)
            )

    def bundles_in_use(self, since: float) -> set[str]:
        held = select(ExperimentRow.c.id).where(ExperimentRow.c.id == SubmissionRow.c.experiment_id).exists()
        grouped = select(GroupRow.c.id).where(GroupRow.c.id == SubmissionRow.c.experiment_id).exists()
        query = select(SubmissionRow.c.bundle_sha256).where(
            or_(held, grouped, SubmissionRow.c.submitted_at >= since)
        )
        with self.engine.connect() as conn:
            return {str(sha) for sha in conn.execute(query).scalars()}


def _held(conn: Connection, user: str, key: str, now: float) -> Submission | None:
    row = conn.execute(
        select(*_COLUMNS).where(
            SubmissionRow.c.user == user,
            SubmissionRow.c.idempotency_key == key,
            or_(SubmissionRow.c.key_expires_at.is_(None), SubmissionRow.c.key_expires_at > now),
        )
    ).first()
    return None if row is None else _submission(row)


def _expire(conn: Connection, user: str, key: str) -> None:
    """An expired key is free again: the old submission keeps its row, not its key."""
    conn.execute(
        update(SubmissionRow)
        .where(SubmissionRow.c.user == user, SubmissionRow.c.idempotency_key == key)
        .values(idempotency_key=None)
    )


def _replayed(held: Submission, sub: Submission) -> Submission:
    if held.fingerprint != sub.fingerprint or held.kind != sub.kind:
        raise key_conflict(sub.key or "")
    return held


def _insert(conn: Connection, acceptance: Acceptance, now: float) -> None:
    sub, record = acceptance.submission, acceptance.record
    if isinstance(record, NewExperiment):
        _insert_experiment(conn, record, now)
    else:
        _insert_group(conn, record, now)
    conn.execute(
        insert(SubmissionRow).values(
            experiment_id=sub.id,
            kind=sub.kind.value,
            idempotency_key=sub.key,
            bundle_sha256=sub.bundle_sha256,
            submitted_at=now,
            user=sub.user,
            fingerprint=sub.fingerprint,
            key_expires_at=None if sub.key is None else now + acceptance.key_ttl,
            state=sub.state.value,
        )
    )
    if sub.user is not None:
        conn.execute(insert(LaunchRow).values(kind=sub.kind.value, object_id=sub.id, user=sub.user, at=now))
    entry = acceptance.audit
    if entry is not None:
        conn.execute(
            insert(AuditRow).values(
                at=now,
                actor=entry.actor[:64],
                action=entry.action[:64],
                target=entry.target[:255],
                project=entry.project,
                detail=entry.detail,
            )
        )


def _insert_experiment(conn: Connection, e: NewExperiment, now: float) -> None:
    if conn.execute(select(ExperimentRow.c.id).where(ExperimentRow.c.id == e.id)).scalar():
        raise Conflict(f"experiment {e.id} already exists")
    conn.execute(
        insert(ExperimentRow).values(
            id=e.id,
            name=e.name,
            project=e.project,
            status=e.status.value,
            framework=e.framework,
            backend=e.backend,
            cluster=e.cluster,
            tags=list(e.tags),
            topology=dict(e.topology),
            spec_text=e.spec_text,
            plan=dict(e.plan),
            reason=None,
            created_at=now,
            started_at=None,
            finished_at=None,
            handle=None,
        )
    )
    if e.replicas:
        conn.execute(insert(ReplicaRow), [replica_values(e.id, r) for r in e.replicas])


def _insert_group(conn: Connection, g: NewGroup, now: float) -> None:
    conn.execute(
        insert(GroupRow).values(
            id=g.id,
            name=g.name,
            project=g.project,
            search=g.search,
            planned=g.planned,
            concurrency=g.concurrency,
            metric=g.metric,
            optimization=g.optimization,
            spec_text=g.spec_text,
            source_file=g.source_file,
            workdir=g.workdir,
            options=dict(g.options),
            status=GroupStatus.CREATED.value,
            reason=None,
            controller_pid=None,
            controller_host=None,
            stop_requested=0,
            created_at=now,
            finished_at=None,
        )
    )
