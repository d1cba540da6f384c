"""What an experiment recorded besides its scalars, read back: hyperparameters, artifacts, models,
console lines and texts. A part of SqlStore (its base class), kept apart so each file has one job."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, select

from phalanx.domain import LogLine
from phalanx.store.base import ArtifactRecord, ModelRecord, ParamRecord, merge_params
from phalanx.store.sql.errors import phalanx_errors
from phalanx.store.sql.lookup import resolve as _resolve
from phalanx.store.sql.models import ArtifactRow, LogRow, ModelRow, ParamRow, TextRow


@phalanx_errors
class RecordReads:
    engine: Engine

    def params(self, experiment_id: str) -> list[ParamRecord]:
        """Hyperparameters, read from append-only rows: per (section, key) and writer (replica,
        rank), that writer's latest report. Writers that agree give one record (the latest); writers
        that differ (a per-rank seed, ``--rank``) give one record each, so no rank's value is hidden.
        Ordered by section, key, rank, replica."""
        with self.engine.connect() as conn:
            full = _resolve(conn, experiment_id)
            rows = conn.execute(
                select(ParamRow)
                .where(ParamRow.c.experiment_id == full)
                .order_by(ParamRow.c.time, ParamRow.c.id)
            ).all()
        records = [
            ParamRecord(m["section"], m["key"], m["value"], m["replica"], m["rank"], m["time"])
            for m in (r._mapping for r in rows)
        ]
        return merge_params(records)

    def artifacts(self, experiment_id: str) -> list[ArtifactRecord]:
        with self.engine.connect() as conn:
            full = _resolve(conn, experiment_id)
            rows = conn.execute(
                select(ArtifactRow).where(ArtifactRow.c.experiment_id == full).order_by(ArtifactRow.c.name)
            ).all()
        return [
            ArtifactRecord(
                name=m["name"],
                kind=m["kind"],
                path=m["path"],
                size=m["size"],
                content_type=m["content_type"],
                replica=m["replica"],
                rank=m["rank"],
                time=m["time"],
                metadata=m["meta"] or {},
            )
            for m in (r._mapping for r in rows)
        ]

    def models(self, experiment_id: str) -> list[ModelRecord]:
        with self.engine.connect() as conn:
            full = _resolve(conn, experiment_id)
            rows = conn.execute(
                select(ModelRow).where(ModelRow.c.experiment_id == full).order_by(ModelRow.c.name)
            ).all()
        return [
            ModelRecord(
                name=m["name"],
                format=m["format"],
                path=m["path"],
                size=m["size"],
                replica=m["replica"],
                time=m["time"],
                metadata=m["meta"] or {},
            )
            for m in (r._mapping for r in rows)
        ]

    def logs(
        self,
        experiment_id: str,
        replica: str | None = None,
        offset: int = 0,
        limit: int | None = None,
        from_end: bool = False,
    ) -> list[LogLine]:
        """Console lines in order. With ``replica``: that replica's lines from ``offset`` on (offsets
        are per replica). Without: every replica's lines ordered by time, ``offset`` skipping rows.
        ``from_end``: ``offset`` lines back from the last one, read backwards, returned in order."""
        with self.engine.connect() as conn:
            full = _resolve(conn, experiment_id)
            q = select(
                LogRow.c.offset, LogRow.c.replica, LogRow.c.text, LogRow.c.time, LogRow.c.stream
            ).where(LogRow.c.experiment_id == full)
            if from_end:
                if replica is not None:
                    q = q.where(LogRow.c.replica == replica).order_by(LogRow.c.offset.desc())
                else:
                    q = q.order_by(LogRow.c.time.desc(), LogRow.c.id.desc())
                q = q.offset(offset)
            elif replica is not None:
                q = q.where(LogRow.c.replica == replica, LogRow.c.offset >= offset).order_by(LogRow.c.offset)
            else:
                q = q.order_by(LogRow.c.time, LogRow.c.id).offset(offset)
            if limit is not None:
                q = q.limit(limit)
            rows = conn.execute(q).all()
        if from_end:
            rows = rows[::-1]
        return [LogLine(offset=o, replica=r, text=t, time=tm, stream=s) for o, r, t, tm, s in rows]

    def texts(self, experiment_id: str) -> list[dict[str, Any]]:
        """report_text() entries in order: title, text, step, replica, rank, time."""
        with self.engine.connect() as conn:
            full = _resolve(conn, experiment_id)
            rows = conn.execute(
                select(
                    TextRow.c.title,
                    TextRow.c.text,
                    TextRow.c.step,
                    TextRow.c.replica,
                    TextRow.c.rank,
                    TextRow.c.time,
                )
                .where(TextRow.c.experiment_id == full)
                .order_by(TextRow.c.time, TextRow.c.id)
            ).all()
        return [dict(r._mapping) for r in rows]
