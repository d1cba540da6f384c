"""A multi-resolution summary of every scalar series, so a chart never reads the raw points.

Why: a chart is at most a couple of thousand pixels wide, yet a series may hold millions of points;
reading them all per request made the Scalars tab of a big run seconds slow. So the store keeps, per
series and for buckets of 16, 256, 4096, 65536 and 1048576 steps (levels 1-5), each bucket's
point count, min, max, first and last step, and the value and time at its last step
(``scalar_summary``). A view of N pixels then reads about N rows of the right level, whatever the
size of the series, and a zoomed view reads only the buckets in its window.

The summary is maintained at ingest, in the same transaction as the points: level 1 is aggregated
from the batch's points in memory and merged into the stored buckets (``merge_level1``), the levels
above are recomputed from the level beneath over the buckets the batch touched (``refresh_upper``),
so the result is exact whatever order batches arrive in; ``rebuild`` starts a series' summary over
from its points after a later attempt replaced some of them.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import islice
from operator import le
from typing import Any

from sqlalchemy import Connection, text

from phalanx.downsample import downsample_indices
from phalanx.store.sql import points
from phalanx.store.sql.driver import executemany, fetch

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


# --- level 1, at ingest ----------------------------------------------------------------------------
# Level 1 is aggregated here, in Python, from the points the batch brings (they are in memory
# already), and merged into the stored buckets by an upsert whose SET combines old and new
# (both databases apply it atomically per row, so concurrent writers of one bucket do not lose
# each other's points; the store's (stream, seq) keys make sure no point is counted twice). The
# levels above are then recomputed from level 1 in SQL, over the few buckets touched.

SHIFT = 4  # 2**SHIFT == BASE: step >> SHIFT is floor(step / 16), negative steps included

_MERGE = """
    INSERT INTO scalar_summary (series_id, level, bucket, n, min_value, max_value, first_step,
        last_step, min_time, max_time, first_value, last_value, last_time, min_step, max_step)
    VALUES (?, 1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
    ON CONFLICT (series_id, level, bucket) DO UPDATE SET
        n = scalar_summary.n + excluded.n,
        min_step = CASE WHEN excluded.min_value IS NOT NULL AND (scalar_summary.min_value IS NULL
            OR excluded.min_value < scalar_summary.min_value) THEN excluded.min_step
            ELSE scalar_summary.min_step END,
        min_value = CASE WHEN excluded.min_value IS NOT NULL AND (scalar_summary.min_value IS NULL
            OR excluded.min_value < scalar_summary.min_value) THEN excluded.min_value
            ELSE scalar_summary.min_value END,
        max_step = CASE WHEN excluded.max_value IS NOT NULL AND (scalar_summary.max_value IS NULL
            OR excluded.max_value > scalar_summary.max_value) THEN excluded.max_step
            ELSE scalar_summary.max_step END,
        max_value = CASE WHEN excluded.max_value IS NOT NULL AND (scalar_summary.max_value IS NULL
            OR excluded.max_value > scalar_summary.max_value) THEN excluded.max_value
            ELSE scalar_summary.max_value END,
        first_value = CASE WHEN excluded.first_step < scalar_summary.first_step
            THEN excluded.first_value ELSE scalar_summary.first_value END,
        first_step = CASE WHEN excluded.first_step < scalar_summary.first_step
            THEN excluded.first_step ELSE scalar_summary.first_step END,
        last_value = CASE WHEN excluded.last_step >= scalar_summary.last_step
            THEN excluded.last_value ELSE scalar_summary.last_value END,
        last_time = CASE WHEN excluded.last_step >= scalar_summary.last_step
            THEN excluded.last_time ELSE scalar_summary.last_time END,
        last_step = CASE WHEN excluded.last_step >= scalar_summary.last_step
            THEN excluded.last_step ELSE scalar_summary.last_step END,
        min_time = CASE WHEN excluded.min_time < scalar_summary.min_time
            THEN excluded.min_time ELSE scalar_summary.min_time END,
        max_time = CASE WHEN excluded.max_time > scalar_summary.max_time
            THEN excluded.max_time ELSE scalar_summary.max_time END
"""


def aggregate(
    rows: Iterable[tuple[int, Sequence[int], Sequence[float], Sequence[float]]],
) -> dict[tuple[int, int], list[Any]]:
    """Level-1 buckets of points given as (series id, steps, values, times) columns, each in the
    order the points arrived. A bucket: [n, min, max, first_step, last_step, min_time, max_time,
    first_value, last_value, last_time, min_step, max_step]; NaN values count as points but never
    as min or max. Columns in step order without NaN (what a training loop reports) are taken a
    bucket at a time with C-speed slices; others point by point, with the same result."""
    out: dict[tuple[int, int], list[Any]] = {}
    for sid, steps, values, times in rows:
        if _in_order(steps) and _no_nan(values):
            _by_bucket(out, sid, steps, values, times)
        else:
            _by_point(out, sid, steps, values, times)
    return out


def _in_order(steps: Sequence[int]) -> bool:
    return all(map(le, steps, islice(steps, 1, None)))


def _no_nan(values: Sequence[float]) -> bool:
    try:
        return not math.isnan(sum(values))  # inf - inf is NaN too: then point by point, still right
    except TypeError:  # a None
        return False


def _by_bucket(
    out: dict[tuple[int, int], list[Any]],
    sid: int,
    steps: Sequence[int],
    values: Sequence[float],
    times: Sequence[float],
) -> None:
    n, i = len(steps), 0
    while i < n:
        bucket = steps[i] >> SHIFT
        j = bisect_left(steps, (bucket + 1) << SHIFT, i + 1, n)
        vs, ts = values[i:j], times[i:j]
        low, high = min(vs), max(vs)
        fresh = [
            j - i,
            low,
            high,
            steps[i],
            steps[j - 1],
            min(ts),
            max(ts),
            values[i],
            values[j - 1],
            times[j - 1],
            steps[i + vs.index(low)],
            steps[i + vs.index(high)],
        ]
        held = out.get((sid, bucket))
        if held is None:
            out[(sid, bucket)] = fresh
        else:
            _combine(held, fresh)
        i = j


def _combine(b: list[Any], later: list[Any]) -> None:
    """Bucket ``b`` with the points of ``later`` (which arrived after them) added."""
    b[0] += later[0]
    if later[1] is not None and (b[1] is None or later[1] < b[1]):
        b[1], b[10] = later[1], later[10]
    if later[2] is not None and (b[2] is None or later[2] > b[2]):
        b[2], b[11] = later[2], later[11]
    if later[3] < b[3]:
        b[3], b[7] = later[3], later[7]
    if later[4] >= b[4]:
        b[4], b[8], b[9] = later[4], later[8], later[9]
    b[5], b[6] = min(b[5], later[5]), max(b[6], later[6])


def _by_point(
    out: dict[tuple[int, int], list[Any]],
    sid: int,
    steps: Sequence[int],
    values: Sequence[float],
    times: Sequence[float],
) -> None:
    for step, v, t in zip(steps, values, times, strict=True):
        key = (sid, step >> SHIFT)
        b = out.get(key)
        real = v == v and v is not None  # NaN (and a NULL) is no min or max
        if b is None:
            out[key] = [
                1,
                v if real else None,
                v if real else None,
                step,
                step,
                t,
                t,
                v,
                v,
                t,
                step if real else None,
                step if real else None,
            ]
            continue
        b[0] += 1
        if real:
            if b[1] is None or v < b[1]:
                b[1], b[10] = v, step
            if b[2] is None or v > b[2]:
                b[2], b[11] = v, step
        if step < b[3]:
            b[3], b[7] = step, v
        if step >= b[4]:
            b[4], b[8], b[9] = step, v, t
        if t < b[5]:
            b[5] = t
        if t > b[6]:
            b[6] = t


def merge_level1(conn: Connection, buckets: Mapping[tuple[int, int], list[Any]]) -> None:
    """Merge freshly aggregated level-1 buckets into the stored ones."""
    if not buckets:
        return

    def nan_free(x: Any) -> Any:
        return None if isinstance(x, float) and x != x else x  # NaN is NULL (SQLite does so anyway)

    params = [
        (
            sid,
            bucket,
            b[0],
            b[1],
            b[2],
            b[3],
            b[4],
            b[5],
            b[6],
            nan_free(b[7]),
            nan_free(b[8]),
            b[9],
            b[10],
            b[11],
        )
        for (sid, bucket), b in sorted(buckets.items())
    ]
    executemany(conn, _MERGE, params)


def refresh_upper(conn: Connection, spans: Mapping[int, tuple[int, int]]) -> None:
    """Recompute levels 2.. over steps ``lo..hi`` of each series from level 1."""
    ups = {level: tuple(text(q) for q in _level_up(level)) for level in LEVELS[1:]}
    for sid, (lo, hi) in spans.items():
        for level in LEVELS[1:]:
            plo, phi = lo // width(level), hi // width(level)
            up, last = ups[level]
            conn.execute(up, {"sid": sid, "lo": plo * BASE, "hi": phi * BASE + BASE - 1})
            conn.execute(last, {"sid": sid, "blo": plo, "bhi": phi})


def rebuild(conn: Connection, series_ids: Iterable[int]) -> None:
    """Build these series' summary again from their points: after points were deleted (a later
    attempt replaced them), buckets that lost points, or all of them, must not keep counting them.
    The points are read in order (step, then arrival), so the rebuilt buckets are those an ingest
    of the same points in that order makes."""
    for sid in sorted(set(series_ids)):
        conn.execute(text("DELETE FROM scalar_summary WHERE series_id = :sid"), {"sid": sid})
        found = points.read(conn, sid)
        if not found.steps:
            continue
        merge_level1(conn, aggregate([(sid, found.steps, found.values, found.times)]))
        refresh_upper(conn, {sid: (found.steps[0], found.steps[-1])})


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
    found = fetch(
        conn,
        "SELECT sum(n), min(first_step), max(last_step), min(min_time), max(max_time) "
        f"FROM scalar_summary WHERE series_id = ? AND level = {LEVELS[-1]}",
        (sid,),
    )
    row = found[0] if found else None
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
        found = _time_to_steps(
            conn, sid, -math.inf if x_min is None else x_min, math.inf if x_max is None else x_max
        )
        if found is None:
            return View([], [], [], count, count > 0)
        lo, hi = found
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
    in_window = fetch(
        conn,
        "SELECT sum(n) FROM scalar_summary WHERE series_id = ? AND level = ? AND bucket >= ? AND bucket <= ?",
        (sid, est_level, lo // w, hi // w),
    )[0][0]
    if int(in_window or 0) <= max_points:
        return _raw(conn, sid, lo, hi, tlo, thi, count, max_points)
    level = _level_for(hi - lo, max(max_points // 2, 2))
    w = width(level)
    rows = fetch(
        conn,
        "SELECT first_step, last_step, min_step, max_step, first_value, min_value, max_value, "
        "last_value, min_time, max_time FROM scalar_summary WHERE series_id = ? "
        "AND level = ? AND bucket >= ? AND bucket <= ? ORDER BY bucket",
        (sid, level, lo // w, hi // w),
    )
    steps: list[int] = []
    values: list[float] = []
    times: list[float] = []
    nan = math.nan
    opening = True
    last_value: float | None = None
    tl: float | None = None
    ls = 0
    for fs, ls, mns, mxs, fv, mn, mx, lv, tmin, tmax in rows:
        if tlo is not None and tmax is not None and tmax < tlo:
            continue
        if thi is not None and tmin is not None and tmin > thi:
            continue
        t0 = tmin if tmin is not None else 0.0
        tl = tmax if tmax is not None else t0
        last_value = lv
        rate = 0.0 if ls == fs else (tl - t0) / (ls - fs)  # time interpolated inside the bucket
        if opening:  # the window's first bucket: its first point too
            opening = False
            steps.append(fs)
            values.append(nan if fv is None else fv)
            times.append(t0)
        if mns is not None and mxs is not None:
            pair = ((mns, mn), (mxs, mx)) if mns <= mxs else ((mxs, mx), (mns, mn))
            for step, value in pair:
                if step > steps[-1]:
                    steps.append(step)
                    values.append(value)
                    times.append(t0 + rate * (step - fs))
    if not opening and ls > steps[-1]:  # the exact last point
        steps.append(ls)
        values.append(nan if last_value is None else last_value)
        times.append(tl or 0.0)
    return View(steps, values, times, count, True)


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
    found = points.read(conn, sid, lo, hi)
    steps, values, times = found.steps, found.values, found.times
    if tlo is not None or thi is not None:
        low = -math.inf if tlo is None else tlo
        high = math.inf if thi is None else thi
        keep = [i for i, t in enumerate(times) if low <= t <= high]
        steps, values, times = [steps[k] for k in keep], [values[k] for k in keep], [times[k] for k in keep]
    if len(steps) > max_points:
        keep = downsample_indices(values, max_points)
        steps, values, times = [steps[k] for k in keep], [values[k] for k in keep], [times[k] for k in keep]
    return View(steps, values, times, count, len(steps) < count)
