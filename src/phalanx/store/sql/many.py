"""Reads of many experiments at once, for Compare of 100 runs and more: their params, their chart
titles and one title's points, each in a few queries on one connection instead of a few queries
per experiment (``GET /compare?ids=`` and ``GET /metrics/TITLE?ids=``). A part of SqlStore (its
base class), kept apart so each file has one job. Ids are full ids (an unknown one is left out)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Engine, select

from phalanx.domain import Series
from phalanx.store.base import ParamRecord, SeriesView, merge_params
from phalanx.store.sql.errors import phalanx_errors
from phalanx.store.sql.models import ParamRow, SeriesRow
from phalanx.store.sql.summary import read_view

BATCH = 500  # ids per IN (...): within SQLite's bound parameters


@phalanx_errors
class ManyReads:
    engine: Engine

    def params_of(self, ids: Sequence[str]) -> dict[str, list[ParamRecord]]:
        out: dict[str, list[ParamRecord]] = {i: [] for i in ids}
        with self.engine.connect() as conn:
            for part in _parts(ids):
                rows = conn.execute(
                    select(ParamRow)
                    .where(ParamRow.c.experiment_id.in_(part))
                    .order_by(ParamRow.c.time, ParamRow.c.id)
                ).all()
                for m in (r._mapping for r in rows):
                    record = ParamRecord(
                        m["section"], m["key"], m["value"], m["replica"], m["rank"], m["time"]
                    )
                    out[m["experiment_id"]].append(record)
        return {i: merge_params(records) for i, records in out.items()}

    def metric_titles_of(self, ids: Sequence[str]) -> dict[str, dict[str, list[str]]]:
        out: dict[str, dict[str, list[str]]] = {i: {} for i in ids}
        with self.engine.connect() as conn:
            for part in _parts(ids):
                rows = conn.execute(
                    select(SeriesRow.c.experiment_id, SeriesRow.c.title, SeriesRow.c.series)
                    .where(SeriesRow.c.experiment_id.in_(part))
                    .order_by(SeriesRow.c.title, SeriesRow.c.series)
                ).all()
                for exp, title, series in rows:
                    out[exp].setdefault(title, []).append(series)
        return out

    def metric_views(
        self,
        ids: Sequence[str],
        title: str,
        *,
        x: str = "step",
        x_min: float | None = None,
        x_max: float | None = None,
        max_points: int = 1000,
    ) -> dict[str, dict[str, SeriesView]]:
        out: dict[str, dict[str, SeriesView]] = {}
        with self.engine.connect() as conn:
            for part in _parts(ids):
                keys = conn.execute(
                    select(SeriesRow.c.id, SeriesRow.c.experiment_id, SeriesRow.c.series)
                    .where(SeriesRow.c.experiment_id.in_(part), SeriesRow.c.title == title)
                    .order_by(SeriesRow.c.experiment_id, SeriesRow.c.series)
                ).all()
                for sid, exp, name in keys:
                    found = read_view(conn, int(sid), x=x, x_min=x_min, x_max=x_max, max_points=max_points)
                    if found is not None:
                        series = Series(found.steps, found.values, found.times)
                        out.setdefault(exp, {})[str(name)] = SeriesView(
                            series, found.count, found.downsampled
                        )
        return {i: out[i] for i in ids if i in out}


def _parts(ids: Sequence[str]) -> list[list[str]]:
    unique = list(dict.fromkeys(ids))
    return [unique[i : i + BATCH] for i in range(0, len(unique), BATCH)]
