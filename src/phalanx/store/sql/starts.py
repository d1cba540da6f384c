"""An experiment's attempts (each start, restart and `phalanx resume`) and the starts of each replica
that Kubernetes restarts on its own. A part of SqlStore (its base class), kept apart so each file
has one job; what an attempt means for the points is store.sql.attempts."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import Engine, func, insert, select, update

from phalanx.domain import ExperimentStatus
from phalanx.store.sql.errors import phalanx_errors
from phalanx.store.sql.lookup import resolve as _resolve
from phalanx.store.sql.models import AttemptRow, ReplicaStartRow


@phalanx_errors
class AttemptBook:
    engine: Engine
    _writer: Engine

    def add_attempt(
        self,
        experiment_id: str,
        *,
        kind: str,
        checkpoint_step: int | None = None,
        started_at: float | None = None,
    ) -> int:
        """Record a started group (kind: start, restart or resume); returns its number (0, 1, ...)."""
        with self._writer.begin() as conn:
            full = _resolve(conn, experiment_id)
            last = conn.execute(
                select(func.max(AttemptRow.c.number)).where(AttemptRow.c.experiment_id == full)
            ).scalar()
            number = 0 if last is None else int(last) + 1
            conn.execute(
                insert(AttemptRow).values(
                    experiment_id=full,
                    number=number,
                    kind=kind,
                    status=ExperimentStatus.RUNNING.value,
                    checkpoint_step=checkpoint_step,
                    started_at=started_at or time.time(),
                )
            )
        return number

    def finish_attempt(
        self, experiment_id: str, number: int, *, status: ExperimentStatus, reason: str | None = None
    ) -> None:
        with self._writer.begin() as conn:
            full = _resolve(conn, experiment_id)
            conn.execute(
                update(AttemptRow)
                .where(AttemptRow.c.experiment_id == full, AttemptRow.c.number == number)
                .values(status=ExperimentStatus(status).value, reason=reason, finished_at=time.time())
            )

    def next_attempt(self, experiment_id: str, replica: str, at_least: int = 0) -> int:
        """The attempt number of a new start of ``replica``: one more than its last start, and at
        least ``at_least`` (the attempt the supervisor gave the whole group, e.g. a `phalanx
        resume`). Each call hands out a new number, so two starts never share one."""
        with self._writer.begin() as conn:
            full = _resolve(conn, experiment_id)
            key = (ReplicaStartRow.c.experiment_id == full, ReplicaStartRow.c.replica == replica)
            from sqlalchemy.dialects import postgresql, sqlite  # why: only when a replica starts (0.25 s)

            dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
            # the row first (a concurrent first start of the same replica finds it), then locked
            conn.execute(
                dialect.insert(ReplicaStartRow)
                .values(experiment_id=full, replica=replica, last=-1)
                .on_conflict_do_nothing()
            )
            query = select(ReplicaStartRow.c.last).where(*key)
            if conn.dialect.name == "postgresql":
                query = query.with_for_update()
            number = max(at_least, int(conn.execute(query).scalar_one()) + 1)
            conn.execute(update(ReplicaStartRow).where(*key).values(last=number))
        return number

    def replica_starts(self, experiment_id: str) -> dict[str, int]:
        with self.engine.connect() as conn:
            full = _resolve(conn, experiment_id)
            rows = conn.execute(
                select(ReplicaStartRow.c.replica, ReplicaStartRow.c.last)
                .where(ReplicaStartRow.c.experiment_id == full)
                .order_by(ReplicaStartRow.c.replica)
            )
            return {str(r[0]): int(r[1]) for r in rows}

    def attempts(self, experiment_id: str) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            full = _resolve(conn, experiment_id)
            rows = conn.execute(
                select(AttemptRow).where(AttemptRow.c.experiment_id == full).order_by(AttemptRow.c.number)
            ).all()
        return [
            {
                "number": m["number"],
                "kind": m["kind"],
                "status": m["status"],
                "reason": m["reason"],
                "checkpoint_step": m["checkpoint_step"],
                "started_at": m["started_at"],
                "finished_at": m["finished_at"],
            }
            for m in (r._mapping for r in rows)
        ]
