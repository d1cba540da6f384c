"""The run table's extra columns: any hyperparameter, and the last/min/max of any scalar title.

Why here and not in the browser: sorting and filtering by such a column must see every experiment,
not the page on screen. A column's values for many experiments cost two queries: the params rows
of the keys asked for, and the coarsest summary level (``store.sql.summary``; a handful of rows
per series) of the titles asked for, so a metric column never reads the points.

Column names: ``param:KEY`` (a value the script reported, else the declared one; or
``param:SECTION/KEY``) and ``metric:AGG:TITLE`` with AGG one of
last, min, max (over every series of the title: for ``last``, the series reported last), or
``metric:AGG:TITLE@rankN`` over the series holding rank N's points (read from the chunks' rank, only
when such a column is asked for); the grammar is ``store.columns`` (no SQL: the server parses the same names).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, select

from phalanx.domain import DECLARED_SECTIONS
from phalanx.store.base import ParamRecord, merge_params
from phalanx.store.columns import parse_column, split_rank
from phalanx.store.sql.models import ParamRow, ScalarChunkRow, ScalarSummaryRow, SeriesRow
from phalanx.store.summary_writes import LEVELS


def column_values(conn: Connection, ids: Sequence[str], columns: Sequence[str]) -> dict[str, dict[str, Any]]:
    """experiment id -> column -> value (absent when the experiment has none)."""
    out: dict[str, dict[str, Any]] = {i: {} for i in ids}
    if not ids or not columns:
        return out
    parsed = [(c, *parse_column(c)) for c in columns]
    params = [(c, key) for c, kind, key, _ in parsed if kind == "param"]
    metrics = [(c, title, agg) for c, kind, title, agg in parsed if kind == "metric"]
    if params:
        _params(conn, ids, params, out)
    if metrics:
        _metrics(conn, ids, metrics, out)
    return out


def _params(
    conn: Connection, ids: Sequence[str], wanted: list[tuple[str, str]], out: dict[str, dict[str, Any]]
) -> None:
    keys = {key.rsplit("/", 1)[-1] for _, key in wanted} | {key for _, key in wanted}
    rows = conn.execute(
        select(ParamRow)
        .where(ParamRow.c.experiment_id.in_(ids), ParamRow.c.key.in_(keys))
        .order_by(ParamRow.c.time, ParamRow.c.id)
    ).all()
    by_exp: dict[str, list[ParamRecord]] = {}
    for r in rows:
        m = r._mapping
        by_exp.setdefault(m["experiment_id"], []).append(
            ParamRecord(m["section"], m["key"], m["value"], m["replica"], m["rank"], m["time"])
        )
    for exp, records in by_exp.items():
        # merged: by section, key, rank: the first match is rank 0's / the master's; what the script
        # reported before what was declared at launch (the Declared/Trial sections: the fallback)
        merged = sorted(merge_params(records), key=lambda p: p.section in DECLARED_SECTIONS)
        for column, key in wanted:
            for p in merged:
                if p.key == key or f"{p.section}/{p.key}" == key:
                    out[exp][column] = p.value
                    break


def _metrics(
    conn: Connection, ids: Sequence[str], wanted: list[tuple[str, str, str]], out: dict[str, dict[str, Any]]
) -> None:
    split = [(column, *split_rank(title), agg) for column, title, agg in wanted]
    titles = {title for _, title, _, _ in split}
    top = LEVELS[-1]
    rows = conn.execute(
        select(
            SeriesRow.c.id,
            SeriesRow.c.experiment_id,
            SeriesRow.c.title,
            ScalarSummaryRow.c.min_value,
            ScalarSummaryRow.c.max_value,
            ScalarSummaryRow.c.last_step,
            ScalarSummaryRow.c.last_value,
            ScalarSummaryRow.c.last_time,
        )
        .join(ScalarSummaryRow, ScalarSummaryRow.c.series_id == SeriesRow.c.id)
        .where(
            SeriesRow.c.experiment_id.in_(ids), SeriesRow.c.title.in_(titles), ScalarSummaryRow.c.level == top
        )
    ).all()
    ranks_of = _series_ranks(conn, {r[0] for r in rows}) if any(r is not None for _, _, r, _ in split) else {}
    acc: dict[tuple[str, str, int | None], dict[str, Any]] = {}
    for series_id, exp, title, mn, mx, last_step, last_value, last_time in rows:
        # every series counts for the title; a rank's own column only the series that rank reported
        for rank in (None, *ranks_of.get(series_id, ())):
            a = acc.setdefault((exp, title, rank), {"min": None, "max": None, "last": None, "at": None})
            if mn is not None and (a["min"] is None or mn < a["min"]):
                a["min"] = mn
            if mx is not None and (a["max"] is None or mx > a["max"]):
                a["max"] = mx
            at = (last_time or 0.0, last_step)
            if a["at"] is None or at > a["at"]:
                a["at"], a["last"] = at, last_value
    for column, title, rank, agg in split:
        for exp in ids:
            value = acc.get((exp, title, rank), {}).get(agg)
            if value is not None and not (isinstance(value, float) and math.isnan(value)):
                out[exp][column] = value


def _series_ranks(conn: Connection, series: set[int]) -> dict[int, set[int]]:
    """The ranks whose points each series holds (a chunk is one writer's): read only for a
    ``@rankN`` column."""
    found: dict[int, set[int]] = {}
    ordered = sorted(series)
    for i in range(0, len(ordered), 900):  # SQLite's bound parameters, with room to spare
        rows = conn.execute(
            select(ScalarChunkRow.c.series_id, ScalarChunkRow.c.rank)
            .distinct()
            .where(ScalarChunkRow.c.series_id.in_(ordered[i : i + 900]), ScalarChunkRow.c.rank.is_not(None))
        ).all()
        for series_id, rank in rows:
            if rank is not None:
                found.setdefault(series_id, set()).add(int(rank))
    return found
