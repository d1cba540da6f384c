"""Keeping a scalar series' summary at ingest (``store.sql.summary`` says what it holds and reads
it): level 1 aggregated in memory from a batch's points (``aggregate``) and merged into the stored
buckets (``merge_level1``), the levels above recomputed from level 1 over the buckets the batch
touched (``refresh_upper``). Written once for every door (``store.db.Db``): the full store and a
supervisor's ``sqlite3`` writer run the same statements. Standard library only."""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from itertools import chain, islice, repeat
from operator import add, rshift, sub
from typing import Any

from phalanx.store.chunks import in_order, listed
from phalanx.store.db import Db

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
        f"c.series_id = ? AND c.level = {level - 1} AND c.bucket >= scalar_summary.bucket * {BASE} "
        f"AND c.bucket <= scalar_summary.bucket * {BASE} + {BASE - 1}"
    )
    up = f"""
        INSERT INTO scalar_summary ({_COLUMNS})
        SELECT series_id, {level}, {_bucket_expr("bucket", BASE)}, sum(n), min(min_value), max(max_value),
               min(first_step), max(last_step), min(min_time), max(max_time)
        FROM scalar_summary WHERE series_id = ? AND level = {level - 1} AND bucket >= ? AND bucket <= ?
        GROUP BY series_id, {_bucket_expr("bucket", BASE)}
        {_UPSERT}
    """
    last = f"""
        UPDATE scalar_summary SET
            first_value = (SELECT c.first_value FROM scalar_summary c WHERE c.series_id = ?
                           AND c.level = {level - 1} AND c.bucket = {first_child}),
            last_value = (SELECT c.last_value FROM scalar_summary c WHERE c.series_id = ?
                          AND c.level = {level - 1} AND c.bucket = {last_child}),
            last_time = (SELECT c.last_time FROM scalar_summary c WHERE c.series_id = ?
                         AND c.level = {level - 1} AND c.bucket = {last_child}),
            min_step = (SELECT c.min_step FROM scalar_summary c WHERE {children}
                        AND c.min_value = scalar_summary.min_value ORDER BY c.min_step LIMIT 1),
            max_step = (SELECT c.max_step FROM scalar_summary c WHERE {children}
                        AND c.max_value = scalar_summary.max_value ORDER BY c.max_step LIMIT 1)
        WHERE series_id = ? AND level = {level} AND bucket >= ? AND bucket <= ?
    """
    return up, last


# --- level 1, at ingest ----------------------------------------------------------------------------
# Level 1 is aggregated here, in Python, from the points the batch brings (they are in memory
# already), and merged into the stored buckets by an upsert whose SET combines old and new
# (both databases apply it atomically per row, so concurrent writers of one bucket do not lose
# each other's points; the store's (stream, seq) keys make sure no point is counted twice). The
# levels above are then recomputed from level 1 in SQL, over the few buckets touched.

SHIFT = 4  # 2**SHIFT == BASE: step >> SHIFT is floor(step / 16), negative steps included

_INTO = """
    INSERT INTO scalar_summary (series_id, level, bucket, n, min_value, max_value, first_step,
        last_step, min_time, max_time, first_value, last_value, last_time, min_step, max_step)
    VALUES """
_ROW = "(?, 1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
_FIELDS = _ROW.count("?")
_MERGE_SET = """
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
_MERGE = _INTO + _ROW + _MERGE_SET
# buckets per statement: a statement's fixed cost (its execution, the driver's call) spread over
# them, a fifth to a third of the merge's time (a batch has thousands of buckets, their keys unique:
# PostgreSQL refuses one statement that updates a row twice)
_MANY = 50
_MERGE_MANY = _INTO + ", ".join([_ROW] * _MANY) + _MERGE_SET


def aggregate(
    rows: Iterable[tuple[int, Sequence[int], Sequence[float], Sequence[float]]],
) -> dict[tuple[int, int], list[Any]]:
    """Level-1 buckets of points given as (series id, steps, values, times) columns, each in the
    order the points arrived. A bucket: [n, min, max, first_step, last_step, min_time, max_time,
    first_value, last_value, last_time, min_step, max_step]; NaN values count as points but never
    as min or max. Columns in step order without NaN (what a training loop reports) are taken a
    bucket at a time by C loops; others point by point, with the same result."""
    out: dict[tuple[int, int], list[Any]] = {}
    for sid, steps, values, times in rows:
        # as lists: each number is made an object once, not at every look (an order check, a min)
        steps, values, times = listed(steps), listed(values), listed(times)
        if in_order(steps) and _no_nan(values):
            _by_bucket(out, sid, steps, values, times)
        else:
            _by_point(out, sid, steps, values, times)
    return out


def _no_nan(values: Sequence[float]) -> bool:
    try:
        return not math.isnan(sum(values))  # inf - inf is NaN too: then point by point, still right
    except TypeError:  # a None
        return False


def _by_bucket(
    out: dict[tuple[int, int], list[Any]],
    sid: int,
    steps: list[int],
    values: list[float],
    times: list[float],
) -> None:
    """Ordered columns without NaN, a bucket's statistics at a time, each gathered for every bucket
    by a C loop (``map`` over the buckets' slices), not by Python statements per bucket: the
    summary was most of what ingest paid per point."""
    n, starts, i = len(steps), [], 0
    if not n:
        return
    while i < n:
        starts.append(i)
        i = bisect_left(steps, ((steps[i] >> SHIFT) + 1) << SHIFT, i + 1, n)
    ends = [*islice(starts, 1, None), n]
    lasts = list(map(sub, ends, repeat(1)))
    vs = list(map(values.__getitem__, map(slice, starts, ends)))
    lows, highs = list(map(min, vs)), list(map(max, vs))
    # the clock went forward (a loop's points): a bucket's first and last times are its ends (where
    # two times are equal, the last one: only 0.0 and -0.0 tell equal times apart)
    if _no_nan(times) and in_order(times):
        min_times, max_times = map(times.__getitem__, starts), map(times.__getitem__, lasts)
    else:
        ts = list(map(times.__getitem__, map(slice, starts, ends)))
        min_times, max_times = map(min, ts), map(max, ts)
    first_steps = list(map(steps.__getitem__, starts))
    columns = (
        map(sub, ends, starts),
        lows,
        highs,
        first_steps,
        map(steps.__getitem__, lasts),
        min_times,
        max_times,
        map(values.__getitem__, starts),
        map(values.__getitem__, lasts),
        map(times.__getitem__, lasts),
        # the first step holding the bucket's min (max), as the point-by-point rule keeps
        map(steps.__getitem__, map(add, starts, map(list.index, vs, lows))),
        map(steps.__getitem__, map(add, starts, map(list.index, vs, highs))),
    )
    keys = zip(repeat(sid), map(rshift, first_steps, repeat(SHIFT)))
    fresh = dict(zip(keys, map(list, zip(*columns, strict=True)), strict=True))
    for key in fresh.keys() & out.keys():  # a bucket an earlier piece of the series began
        _combine(out[key], fresh.pop(key))
    out.update(fresh)


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


def merge_level1(db: Db, buckets: Mapping[tuple[int, int], list[Any]]) -> None:
    """Merge freshly aggregated level-1 buckets into the stored ones."""
    if not buckets:
        return

    # a NaN first or last value is stored as NULL (SQLite does so anyway); ``x == x`` is False
    # only for NaN. One tuple per bucket by unpacking, no call per field: a batch has thousands
    params = [
        (sid, bucket, n, low, high, first, last, tmin, tmax, fv if fv == fv else None,
         lv if lv == lv else None, tlast, at_low, at_high)
        for (sid, bucket), (n, low, high, first, last, tmin, tmax, fv, lv, tlast, at_low, at_high)
        in sorted(buckets.items())
    ]  # fmt: skip
    whole = len(params) - len(params) % _MANY  # in statements of _MANY buckets, the rest one by one
    if whole:
        flat = list(chain.from_iterable(params[:whole]))
        width = _MANY * _FIELDS
        db.executemany(_MERGE_MANY, [flat[i : i + width] for i in range(0, len(flat), width)])
    if whole < len(params):
        db.executemany(_MERGE, params[whole:])


def refresh_upper(db: Db, spans: Mapping[int, tuple[int, int]]) -> None:
    """Recompute levels 2.. over steps ``lo..hi`` of each series from level 1."""
    for sid, (lo, hi) in spans.items():
        for level in LEVELS[1:]:
            plo, phi = lo // width(level), hi // width(level)
            up, last = _LEVEL_UP[level]
            db.execute(up, (sid, plo * BASE, phi * BASE + BASE - 1))
            db.execute(last, (sid,) * 6 + (plo, phi))


_LEVEL_UP = {level: _level_up(level) for level in LEVELS[1:]}
