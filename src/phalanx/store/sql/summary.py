"""A multi-resolution summary of every scalar series, so a chart never reads the raw points.

Why: a chart is at most a couple of thousand pixels wide, yet a series may hold millions of points;
reading them all per request made the Scalars tab of a big run seconds slow. So the store keeps, per
series and for buckets of 16, 256, 4096, 65536 and 1048576 steps (levels 1-5), each bucket's
point count, min, max, first and last step, and the value and time at its last step
(``scalar_summary``). A view of N pixels then reads about N rows of the right level, whatever the
size of the series, and a zoomed view reads only the buckets in its window.

The summary is maintained at ingest, in the same transaction as the points (``refresh``): the
buckets a batch touched are recomputed from the rows beneath them (level 1 from the points, level L
from level L-1), so the result is exact and idempotent whatever order batches arrive in, and a
batch costs one grouped statement per level and series (C speed, not a Python loop per point).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, text

BASE = 16
LEVELS = (1, 2, 3, 4, 5)


def width(level: int) -> int:
    """Steps per bucket at ``level`` (level 0: the raw points)."""
    return int(BASE**level)


def _bucket_expr(column: str, w: int) -> str:
    # floor division for negative steps too (SQL's integer '/' truncates toward zero)
    return f"(CASE WHEN {column} >= 0 THEN {column} / {w} ELSE -((-{column} - 1) / {w}) - 1 END)"


_UPSERT = """
        ON CONFLICT (series_id, level, bucket) DO UPDATE SET
            n = excluded.n, min_value = excluded.min_value, max_value = excluded.max_value,
            first_step = excluded.first_step, last_step = excluded.last_step,
            min_time = excluded.min_time, max_time = excluded.max_time
"""
_COLUMNS = "series_id, level, bucket, n, min_value, max_value, first_step, last_step, min_time, max_time"

# The bucket's aggregates first, then its last value and time in a second statement: SQLite's
# "bare column" trick is undefined with several min()/max() in one query, and this is the same SQL
# on both databases (an indexed lookup per bucket).
LEVEL1 = f"""
    INSERT INTO scalar_summary ({_COLUMNS})
    SELECT series_id, 1, {_bucket_expr("step", BASE)}, count(*), min(value), max(value), min(step),
           max(step), min(time), max(time)
    FROM scalars WHERE series_id = :sid AND step >= :lo AND step <= :hi
    GROUP BY series_id, {_bucket_expr("step", BASE)}
    {_UPSERT}
"""
LEVEL1_LAST = """
    UPDATE scalar_summary SET
        first_value = (SELECT s.value FROM scalars s WHERE s.series_id = :sid
                       AND s.step = scalar_summary.first_step ORDER BY s.id LIMIT 1),
        last_value = (SELECT s.value FROM scalars s WHERE s.series_id = :sid
                      AND s.step = scalar_summary.last_step ORDER BY s.id DESC LIMIT 1),
        last_time = (SELECT s.time FROM scalars s WHERE s.series_id = :sid
                     AND s.step = scalar_summary.last_step ORDER BY s.id DESC LIMIT 1),
        min_step = (SELECT s.step FROM scalars s WHERE s.series_id = :sid
                    AND s.step >= scalar_summary.first_step AND s.step <= scalar_summary.last_step
                    AND s.value = scalar_summary.min_value ORDER BY s.step LIMIT 1),
        max_step = (SELECT s.step FROM scalars s WHERE s.series_id = :sid
                    AND s.step >= scalar_summary.first_step AND s.step <= scalar_summary.last_step
                    AND s.value = scalar_summary.max_value ORDER BY s.step LIMIT 1)
    WHERE series_id = :sid AND level = 1 AND bucket >= :blo AND bucket <= :bhi
"""


def _level_up(level: int) -> tuple[str, str]:
    w = width(level - 1)
    first_child = _bucket_expr("scalar_summary.first_step", w)
    last_child = _bucket_expr("scalar_summary.last_step", w)
    children = (
        f"c.series_id = :sid AND c.level = {level - 1} AND c.bucket >= scalar_summary.bucket * {BASE} "
        f"AND c.bucket <= scalar_summary.bucket * {BASE} + {BASE - 1}"
    )
    up = f"""
        INSERT INTO scalar_summary ({_COLUMNS})
        SELECT series_id, {level}, {_bucket_expr("bucket", BASE)}, sum(n), min(min_value), max(max_value),
               min(first_step), max(last_step), min(min_time), max(max_time)
        FROM scalar_summary WHERE series_id = :sid AND level = {level - 1} AND bucket >= :lo AND bucket <= :hi
        GROUP BY series_id, {_bucket_expr("bucket", BASE)}
        {_UPSERT}
    """
    last = f"""
        UPDATE scalar_summary SET
            first_value = (SELECT c.first_value FROM scalar_summary c WHERE c.series_id = :sid
                           AND c.level = {level - 1} AND c.bucket = {first_child}),
            last_value = (SELECT c.last_value FROM scalar_summary c WHERE c.series_id = :sid
                          AND c.level = {level - 1} AND c.bucket = {last_child}),
            last_time = (SELECT c.last_time FROM scalar_summary c WHERE c.series_id = :sid
                         AND c.level = {level - 1} AND c.bucket = {last_child}),
            min_step = (SELECT c.min_step FROM scalar_summary c WHERE {children}
                        AND c.min_value = scalar_summary.min_value ORDER BY c.min_step LIMIT 1),
            max_step = (SELECT c.max_step FROM scalar_summary c WHERE {children}
                        AND c.max_value = scalar_summary.max_value ORDER BY c.max_step LIMIT 1)
        WHERE series_id = :sid AND level = {level} AND bucket >= :blo AND bucket <= :bhi
    """
    return up, last


def refresh(conn: Connection, spans: Mapping[int, tuple[int, int]]) -> None:
    """Recompute the buckets covering steps ``lo..hi`` of each series id in ``spans``."""
    first, first_last = text(LEVEL1), text(LEVEL1_LAST)
    ups = {level: tuple(text(q) for q in _level_up(level)) for level in LEVELS[1:]}
    for sid, (lo, hi) in spans.items():
        w = width(1)
        blo, bhi = lo // w, hi // w
        conn.execute(first, {"sid": sid, "lo": blo * w, "hi": bhi * w + w - 1})
        conn.execute(first_last, {"sid": sid, "blo": blo, "bhi": bhi})
        for level in LEVELS[1:]:
            plo, phi = lo // width(level), hi // width(level)
            up, last = ups[level]
            # the children (level - 1) of the parent buckets covering lo..hi
            conn.execute(up, {"sid": sid, "lo": plo * BASE, "hi": phi * BASE + BASE - 1})
            conn.execute(last, {"sid": sid, "blo": plo, "bhi": phi})


def backfill(conn: Connection, series_ids: Iterable[int] | None = None) -> None:
    """Build the summary of series already stored (the migration that adds the table)."""
    if series_ids is None:
        series_ids = [int(s) for (s,) in conn.execute(text("SELECT DISTINCT series_id FROM scalars"))]
    spans: dict[int, tuple[int, int]] = {}
    for sid in series_ids:
        row = conn.execute(
            text("SELECT min(step), max(step) FROM scalars WHERE series_id = :sid"), {"sid": sid}
        ).first()
        if row is not None and row[0] is not None:
            spans[sid] = (int(row[0]), int(row[1]))
    refresh(conn, spans)


# --- reading a view ------------------------------------------------------------------------------


@dataclass
class View:
    """One series as a chart of ``max_points`` shows it (see ``read_view``)."""

    steps: list[int]
    values: list[float]
    times: list[float]
    count: int  # points the series holds in all
    downsampled: bool


def _stats(conn: Connection, sid: int) -> tuple[int, int, int, float, float] | None:
    row = conn.execute(
        text(
            "SELECT sum(n), min(first_step), max(last_step), min(min_time), max(max_time) "
            f"FROM scalar_summary WHERE series_id = :sid AND level = {LEVELS[-1]}"
        ),
        {"sid": sid},
    ).first()
    if row is None or row[0] is None:
        return None
    return int(row[0]), int(row[1]), int(row[2]), float(row[3] or 0.0), float(row[4] or 0.0)


def _level_for(span: int, buckets: int) -> int:
    """The finest level whose buckets over ``span`` steps number at most ``buckets``."""
    for level in LEVELS:
        if (span + 1) / width(level) <= buckets:
            return level
    return LEVELS[-1]


def _time_to_steps(conn: Connection, sid: int, lo: float, hi: float) -> tuple[int, int] | None:
    """The step range of the points whose time is in ``lo..hi`` (to 256 steps: level 2 buckets)."""
    row = conn.execute(
        text(
            "SELECT min(first_step), max(last_step) FROM scalar_summary WHERE series_id = :sid "
            "AND level = 2 AND max_time >= :lo AND min_time <= :hi"
        ),
        {"sid": sid, "lo": lo, "hi": hi},
    ).first()
    if row is None or row[0] is None:
        return None
    return int(row[0]), int(row[1])


def _nan(v: float | None) -> float:
    return math.nan if v is None else float(v)


def read_view(
    conn: Connection,
    sid: int,
    *,
    x: str = "step",
    x_min: float | None = None,
    x_max: float | None = None,
    max_points: int = 1000,
) -> View | None:
    """The points of series ``sid`` in the window (along ``x``), at most about ``max_points``:
    the raw points when that few are in the window, else two per bucket (the bucket's min and max,
    the one nearer its last value second, so a trend keeps its direction) at the finest level
    that fits, plus the exact last point. None when the series has no summary (read it raw)."""
    stats = _stats(conn, sid)
    if stats is None:
        return None
    count, first, last, _, _ = stats
    if x == "time" and (x_min is not None or x_max is not None):
        steps = _time_to_steps(
            conn, sid, -math.inf if x_min is None else x_min, math.inf if x_max is None else x_max
        )
        if steps is None:
            return View([], [], [], count, count > 0)
        lo, hi = steps
        tlo, thi = x_min, x_max
    else:
        lo = first if x_min is None else max(first, math.ceil(x_min))
        hi = last if x_max is None else min(last, math.floor(x_max))
        tlo = thi = None
    if lo > hi:
        return View([], [], [], count, count > 0)
    # points in the window, to a bucket or two at each end: read from a level with few buckets there
    est_level = _level_for(hi - lo, 64)
    w = width(est_level)
    in_window = conn.execute(
        text(
            "SELECT sum(n) FROM scalar_summary WHERE series_id = :sid AND level = :level "
            "AND bucket >= :blo AND bucket <= :bhi"
        ),
        {"sid": sid, "level": est_level, "blo": lo // w, "bhi": hi // w},
    ).scalar()
    if int(in_window or 0) <= max_points:
        return _raw(conn, sid, lo, hi, tlo, thi, count, max_points)
    level = _level_for(hi - lo, max(max_points // 2, 2))
    w = width(level)
    rows = conn.execute(
        text(
            "SELECT first_step, last_step, min_step, max_step, first_value, min_value, max_value, "
            "last_value, min_time, max_time FROM scalar_summary WHERE series_id = :sid "
            "AND level = :level AND bucket >= :blo AND bucket <= :bhi ORDER BY bucket"
        ),
        {"sid": sid, "level": level, "blo": lo // w, "bhi": hi // w},
    ).all()
    points: dict[int, tuple[float, float]] = {}  # step -> (value, time)
    last_point: tuple[int, float, float] | None = None
    for fs, ls, mns, mxs, fv, mn, mx, lv, tmin, tmax in rows:
        if tlo is not None and tmax is not None and tmax < tlo:
            continue
        if thi is not None and tmin is not None and tmin > thi:
            continue
        t0 = float(tmin if tmin is not None else 0.0)
        t1 = float(tmax if tmax is not None else t0)
        span = ls - fs
        if last_point is None:  # the window's first bucket: its first point too
            points[int(fs)] = (_nan(fv), t0)
        for step, value in ((mns, mn), (mxs, mx)):
            if step is not None:  # time interpolated inside the bucket (points arrive in order)
                points[int(step)] = (_nan(value), t0 if span == 0 else t0 + (t1 - t0) * (step - fs) / span)
        last_point = (int(ls), _nan(lv), t1)
    if last_point is not None:
        points[last_point[0]] = (last_point[1], last_point[2])  # the exact last point
    ordered = sorted(points)
    return View(ordered, [points[k][0] for k in ordered], [points[k][1] for k in ordered], count, True)


def _raw(
    conn: Connection,
    sid: int,
    lo: int,
    hi: int,
    tlo: float | None,
    thi: float | None,
    count: int,
    max_points: int,
) -> View:
    sql = "SELECT step, value, time FROM scalars WHERE series_id = :sid AND step >= :lo AND step <= :hi"
    params: dict[str, Any] = {"sid": sid, "lo": lo, "hi": hi}
    if tlo is not None:
        sql += " AND time >= :tlo"
        params["tlo"] = tlo
    if thi is not None:
        sql += " AND time <= :thi"
        params["thi"] = thi
    rows = conn.execute(text(sql + " ORDER BY step, id"), params).all()
    steps = [int(r[0]) for r in rows]
    values = [_nan(r[1]) for r in rows]
    times = [float(r[2]) for r in rows]
    if len(rows) > max_points:
        from phalanx.downsample import downsample_indices

        keep = downsample_indices(values, max_points)
        steps, values, times = [steps[k] for k in keep], [values[k] for k in keep], [times[k] for k in keep]
    return View(steps, values, times, count, len(steps) < count)
