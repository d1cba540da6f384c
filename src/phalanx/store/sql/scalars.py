"""Reading scalar series: what the metrics routes, charts, CSV and the pace of ranks ask the store.

A series is what the API and the UI call one: (experiment, title, series), a ``series`` row whose
id keys its points (store.sql.points) and its summary (store.sql.summary). Several replicas may
report into one series (every rank reporting ``loss``); their points are read together, ordered by
step and then by arrival.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, select

from phalanx.domain import Series
from phalanx.store.base import SeriesView
from phalanx.store.db import no_gc
from phalanx.store.sql import points
from phalanx.store.sql.models import SeriesRow
from phalanx.store.sql.summary import read_view


def titles(conn: Connection, experiment_id: str) -> dict[str, list[str]]:
    rows = conn.execute(
        select(SeriesRow.c.title, SeriesRow.c.series)
        .where(SeriesRow.c.experiment_id == experiment_id)
        .order_by(SeriesRow.c.title, SeriesRow.c.series)
    ).all()
    out: dict[str, list[str]] = {}
    for title, series in rows:
        out.setdefault(title, []).append(series)
    return out


def _keys(conn: Connection, experiment_id: str, title: str | None, series: str | None = None) -> list[Any]:
    """(id, title, series) of the experiment's series, by title then series."""
    conds: list[Any] = [SeriesRow.c.experiment_id == experiment_id]
    if title is not None:
        conds.append(SeriesRow.c.title == title)
    if series is not None:
        conds.append(SeriesRow.c.series == series)
    return list(
        conn.execute(
            select(SeriesRow.c.id, SeriesRow.c.title, SeriesRow.c.series)
            .where(*conds)
            .order_by(SeriesRow.c.title, SeriesRow.c.series)
        ).all()
    )


def replicas(conn: Connection, experiment_id: str, title: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for sid, _, name in _keys(conn, experiment_id, title):
        replica = points.latest_replica(conn, int(sid))
        if replica:
            out[name] = replica
    return out


def last_points(conn: Connection, experiment_id: str, title: str, n: int) -> dict[str, Series]:
    out: dict[str, Series] = {}
    for sid, _, name in _keys(conn, experiment_id, title):
        found = points.last(conn, int(sid), n)
        out[name] = Series(found.steps, found.values, found.times)
    return out


def metrics(
    conn: Connection, experiment_id: str, title: str | None, series: str | None
) -> dict[str, dict[str, Series]]:
    out: dict[str, dict[str, Series]] = {}
    for sid, t, s in _keys(conn, experiment_id, title, series):
        with no_gc():
            found = points.read(conn, int(sid))
        if found.steps:  # a series with no point is left out
            out.setdefault(t, {})[s] = Series(found.steps, found.values, found.times)
    return out


def view(
    conn: Connection,
    experiment_id: str,
    title: str,
    *,
    series: str | None,
    x: str,
    x_min: float | None,
    x_max: float | None,
    max_points: int,
) -> dict[str, SeriesView]:
    out: dict[str, SeriesView] = {}
    for sid, _, name in _keys(conn, experiment_id, title, series):
        found = read_view(conn, int(sid), x=x, x_min=x_min, x_max=x_max, max_points=max_points)
        if found is None:
            continue  # a series without points
        out[str(name)] = SeriesView(
            Series(found.steps, found.values, found.times), found.count, found.downsampled
        )
    return out
