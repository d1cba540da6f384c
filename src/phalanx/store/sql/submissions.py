"""The submissions table: which experiment an idempotency key made, and which bundle it ran.

A key is reserved (its row inserted) before the experiment starts, inside one transaction that the
unique constraint arbitrates: of two submits with the same key, one inserts and starts, the other
reads the winner's id. A start that fails releases the key again (nothing half-written).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from sqlalchemy import Engine, delete, insert, select
from sqlalchemy.exc import IntegrityError

from phalanx.store.sql.engine import writer
from phalanx.store.sql.models import SubmissionRow


@dataclass(frozen=True)
class Submission:
    experiment_id: str
    bundle_sha256: str
    submitted_at: float


def reserve(engine: Engine, experiment_id: str, key: str | None, bundle_sha256: str) -> str:
    """Record the submission; returns ``experiment_id``, or the id an earlier submit with the same
    ``key`` reserved (then nothing is written)."""
    try:
        with writer(engine).begin() as conn:
            conn.execute(
                insert(SubmissionRow).values(
                    experiment_id=experiment_id,
                    idempotency_key=key,
                    bundle_sha256=bundle_sha256,
                    submitted_at=time.time(),
                )
            )
        return experiment_id
    except IntegrityError:
        if key is None:
            raise
        with engine.connect() as conn:
            existing = conn.execute(
                select(SubmissionRow.experiment_id).where(SubmissionRow.idempotency_key == key)
            ).scalar_one_or_none()
        if existing is None:  # released between our insert and this read: a failed start
            raise
        return str(existing)


def release(engine: Engine, experiment_id: str) -> None:
    with writer(engine).begin() as conn:
        conn.execute(delete(SubmissionRow).where(SubmissionRow.experiment_id == experiment_id))


def get(engine: Engine, experiment_id: str) -> Submission | None:
    columns = (SubmissionRow.experiment_id, SubmissionRow.bundle_sha256, SubmissionRow.submitted_at)
    with engine.connect() as conn:
        row = conn.execute(select(*columns).where(SubmissionRow.experiment_id == experiment_id)).one_or_none()
    if row is None:
        return None
    return Submission(str(row[0]), str(row[1]), float(row[2]))


def by_key(engine: Engine, key: str) -> Submission | None:
    with engine.connect() as conn:
        exp_id = conn.execute(
            select(SubmissionRow.experiment_id).where(SubmissionRow.idempotency_key == key)
        ).scalar_one_or_none()
    return None if exp_id is None else get(engine, str(exp_id))


def bundles_in_use(engine: Engine, since: float) -> set[str]:
    """The sha256 of every bundle an experiment the store holds ran, or that a submit at or after
    ``since`` reserved (its experiment may not be recorded yet: the row comes first)."""
    from sqlalchemy import or_

    from phalanx.store.sql.models import ExperimentRow

    held = select(ExperimentRow.id).where(ExperimentRow.id == SubmissionRow.experiment_id).exists()
    query = select(SubmissionRow.bundle_sha256).where(or_(held, SubmissionRow.submitted_at >= since))
    with engine.connect() as conn:
        return {str(sha) for sha in conn.execute(query).scalars()}
