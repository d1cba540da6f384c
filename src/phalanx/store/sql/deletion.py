"""Deleting experiments with everything they reported, in the caller's transaction: one
(``SqlStore.delete_experiment``) or a group's trials with the group (``GroupBook.remove_group``).
A live experiment is refused with nothing deleted: it would be pulled from under its supervisor."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection, delete, select

from phalanx.domain import ExperimentStatus
from phalanx.errors import Conflict
from phalanx.store.sql.models import (
    ArtifactRow,
    AttemptRow,
    ExperimentRow,
    LogRow,
    ModelRow,
    ParamRow,
    ReplicaRow,
    ReplicaStartRow,
    ScalarChunkRow,
    ScalarSummaryRow,
    SeriesAttemptRow,
    SeriesRow,
    TextRow,
)

LIVE = (  # its supervisor writes its rows (one still created has none yet: the launcher skips it)
    ExperimentStatus.BUILDING.value,
    ExperimentStatus.RUNNING.value,
    ExperimentStatus.STARTING.value,
    ExperimentStatus.QUEUED.value,
    ExperimentStatus.PENDING.value,
)


def delete_experiments(conn: Connection, ids: Sequence[str]) -> None:
    """Every row of the experiments ``ids`` (full ids); Conflict, nothing deleted, when one is live."""
    found = conn.execute(
        select(ExperimentRow.c.id, ExperimentRow.c.status).where(ExperimentRow.c.id.in_(ids))
    )
    for experiment_id, status in found:
        if status in LIVE:
            raise Conflict(f"experiment {experiment_id} is {status}; stop it before deleting it")
    series = select(SeriesRow.c.id).where(SeriesRow.c.experiment_id.in_(ids))
    conn.execute(delete(ScalarChunkRow).where(ScalarChunkRow.c.series_id.in_(series)))
    conn.execute(delete(ScalarSummaryRow).where(ScalarSummaryRow.c.series_id.in_(series)))
    conn.execute(delete(SeriesAttemptRow).where(SeriesAttemptRow.c.series_id.in_(series)))
    for row in (SeriesRow, ParamRow, ArtifactRow, ModelRow, LogRow, TextRow, ReplicaRow, AttemptRow):
        conn.execute(delete(row).where(row.c.experiment_id.in_(ids)))
    conn.execute(delete(ReplicaStartRow).where(ReplicaStartRow.c.experiment_id.in_(ids)))
    conn.execute(delete(ExperimentRow).where(ExperimentRow.c.id.in_(ids)))
