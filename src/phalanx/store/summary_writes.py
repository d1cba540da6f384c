"""Keeping a scalar series' summary at ingest (``store.sql.summary`` says what it holds and reads
it): level 1 aggregated in memory from a batch's points (``aggregate``) and merged into the stored
buckets, level 2 computed in memory from level 1 (``store.summary_level2``), the levels above
recomputed in SQL from the level beneath over the buckets the batch touched (``refresh_upper``);
``write`` does all of it. Written once for every door (``store.db.Db``): the full store and a
supervisor's ``sqlite3`` writer run the same statements. Standard library only."""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from itertools import chain, islice, repeat
from operator import add, itemgetter, rshift, sub
from typing import Any

from phalanx.store.chunks import in_order, listed, rising
from phalanx.store.db import Db
from phalanx.store.summary_level2 import SHIFT, Row, level2, merged, plain

BASE = 1 << SHIFT
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
# each other's points; the store's (stream, seq) keys make sure no point is counted twice).

_INTO = """
    INSERT INTO scalar_summary (series_id, level, bucket, n, min_value, max_value, first_step,
        last_step, min_time, max_time, first_value, last_value, last_time, min_step, max_step)
    VALUES """


def _row(level: int) -> str:
    return f"(?, {level}, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"


_FIELDS = _row(1).count("?")
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
# level 2, computed from all its children: the row replaces the stored one
_REPLACE_SET = """
    ON CONFLICT (series_id, level, bucket) DO UPDATE SET
        n = excluded.n, min_value = excluded.min_value, max_value = excluded.max_value,
        first_step = excluded.first_step, last_step = excluded.last_step, min_time = excluded.min_time,
        max_time = excluded.max_time, first_value = excluded.first_value, last_value = excluded.last_value,
        last_time = excluded.last_time, min_step = excluded.min_step, max_step = excluded.max_step
"""
# buckets per statement: a statement's fixed cost (its execution, the driver's call) spread over
# them, a fifth to a third of the merge's time (a batch has thousands of buckets, their keys unique:
# PostgreSQL refuses one statement that updates a row twice)
_MANY = 50
_STORED = (
    "SELECT series_id, bucket, n, min_value, max_value, first_step, last_step, min_time, max_time,"
    " first_value, last_value, last_time, min_step, max_step FROM scalar_summary"
    " WHERE series_id = ? AND level = 1 AND bucket >= ? AND bucket <= ? ORDER BY bucket"
)


def aggregate(
    pieces: Iterable[tuple[int, Sequence[int], Sequence[float], Sequence[float]]],
) -> dict[int, list[Row]]:
    """Per series id, the level-1 buckets (in bucket order) of points given as (series id, steps,
    values, times) columns, each in the order the points arrived. NaN values count as points but
    never as min or max; a NaN first or last value is NULL (SQLite stores it so anyway). Columns in
    step order without NaN (what a training loop reports) are taken a bucket at a time by C loops,
    and a series' next such piece joins its buckets (``summary_level2.merged``, which adds later
    points to a bucket as the merge upsert does); others point by point, with the same result."""
    ordered: dict[int, list[Row]] = {}  # series whose buckets are rows in bucket order
    loose: dict[int, dict[int, list[Any]]] = {}  # series taken point by point: bucket -> its fields
    for sid, steps, values, times in pieces:
        # as lists: each number is made an object once, not at every look (an order check, a min)
        steps, values, times = listed(steps), listed(values), listed(times)
        if not steps:
            continue
        strictly = rising(steps)
        if (strictly or in_order(steps)) and _no_nan(values):
            # steps one apart (a loop's): bucket boundaries by arithmetic, not a search per bucket
            fresh = _by_bucket(sid, steps, values, times, strictly and steps[-1] - steps[0] == len(steps) - 1)
            if sid in loose:
                _add(loose[sid], fresh)
            else:
                held = ordered.get(sid)
                ordered[sid] = fresh if held is None else _joined(held, fresh)
        else:
            buckets = loose.get(sid)
            if buckets is None:
                buckets = loose[sid] = {row[1]: list(row[2:]) for row in ordered.pop(sid, [])}
            _by_point(buckets, steps, values, times)
    for sid, buckets in loose.items():
        # ``x == x`` is False only for NaN. One tuple per bucket by unpacking, no call per field
        ordered[sid] = [
            (sid, bucket, n, low, high, first, last, tmin, tmax, fv if fv == fv else None,
             lv if lv == lv else None, tlast, at_low, at_high)
            for bucket, (n, low, high, first, last, tmin, tmax, fv, lv, tlast, at_low, at_high)
            in sorted(buckets.items())
        ]  # fmt: skip
    return ordered


def _joined(held: list[Row], fresh: list[Row]) -> list[Row]:
    """A series' buckets ``held`` with those of its next piece added (both in bucket order): a
    loop's piece begins in the last bucket held or after it."""
    if fresh[0][1] > held[-1][1]:
        held += fresh
    elif fresh[0][1] == held[-1][1]:
        held[-1] = merged(held[-1], fresh[0])
        held += islice(fresh, 1, None)
    else:
        held = _merged_in(held, fresh)
    return held


def _merged_in(held: Iterable[Row], fresh: list[Row]) -> list[Row]:
    """The buckets ``held`` with the ``fresh`` ones merged in (the upsert's rule), in bucket order."""
    by_bucket = {row[1]: tuple(row) for row in held}
    for row in fresh:
        old = by_bucket.get(row[1])
        by_bucket[row[1]] = row if old is None else merged(old, row)
    return [by_bucket[bucket] for bucket in sorted(by_bucket)]


def _add(buckets: dict[int, list[Any]], fresh: list[Row]) -> None:
    """Buckets taken point by point with those of a later piece added."""
    for row in fresh:
        old = buckets.get(row[1])
        buckets[row[1]] = list(row[2:] if old is None else merged((*row[:2], *old), row)[2:])


def _no_nan(values: Sequence[float]) -> bool:
    try:
        return not math.isnan(sum(values))  # inf - inf is NaN too: then point by point, still right
    except TypeError:  # a None
        return False


def _by_bucket(
    sid: int, steps: list[int], values: list[float], times: list[float], contiguous: bool
) -> list[Row]:
    """Ordered columns without NaN, a bucket's statistics at a time, each gathered for every bucket
    by a C loop (``map`` over the buckets' slices), not by Python statements per bucket: the
    summary was most of what ingest paid per point. The rows are made by ``zip``, a C loop too."""
    n = len(steps)
    if contiguous:
        starts = [0, *range((((steps[0] >> SHIFT) + 1) << SHIFT) - steps[0], n, BASE)]
    else:
        starts, i = [], 0
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
    return list(
        zip(
            repeat(sid, len(starts)),
            map(rshift, first_steps, repeat(SHIFT)),
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
            strict=True,
        )
    )


def _by_point(
    out: dict[int, list[Any]], steps: Sequence[int], values: Sequence[float], times: Sequence[float]
) -> None:
    """Buckets ``[n, min, max, first_step, last_step, min_time, max_time, first_value, last_value,
    last_time, min_step, max_step]`` by bucket, the points added one at a time."""
    for step, v, t in zip(steps, values, times, strict=True):
        key = step >> SHIFT
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


def write(db: Db, buckets: Mapping[int, list[Row]]) -> None:
    """Merge each series' freshly aggregated level-1 buckets (``aggregate``) into the stored ones and
    bring the levels above up to date. Level 2 is computed in memory from the level-1 buckets under
    the level-2 buckets touched: the batch's, merged with those stored before (read first; the
    series' rows are the writer's until it commits: ``chunk_writes.lock_series``, SQLite's single
    writer). A series whose times are not all numbers, or one holding a -0.0 on PostgreSQL, takes the
    SQL recompute (``summary_level2.plain``)."""
    series = {sid: rows for sid, rows in sorted(buckets.items()) if rows}
    stored = {sid: _stored_under(db, sid, rows) for sid, rows in series.items()}
    _upsert(db, _MERGE_SET, 1, list(chain.from_iterable(series.values())))
    upper: list[Row] = []
    spans = {sid: (rows[0][5], rows[-1][6]) for sid, rows in series.items()}
    for sid, rows in series.items():
        if plain(rows, db.dialect == "postgresql") and plain(stored[sid], db.dialect == "postgresql"):
            upper += level2(_children(stored[sid], rows))
        else:
            refresh_upper(db, {sid: spans.pop(sid)})
    _upsert(db, _REPLACE_SET, 2, upper)
    refresh_upper(db, spans, LEVELS[2:])


def _stored_under(db: Db, sid: int, rows: list[Row]) -> list[Row]:
    """The stored level-1 buckets under the level-2 buckets the rows (in bucket order) fall in: one
    SELECT per run of adjacent level-2 buckets, not every bucket from the first to the last (a batch
    holding a late point of a long series would read the whole series' level 1 into memory). Only
    those level-2 buckets change: the ones between keep their children, and so their rows."""
    found: list[Row] = []
    runs: list[list[int]] = []  # [first, last] level-2 bucket of each run
    for parent in sorted(set(map(rshift, map(itemgetter(1), rows), repeat(SHIFT)))):
        if runs and parent == runs[-1][1] + 1:
            runs[-1][1] = parent
        else:
            runs.append([parent, parent])
    for first, last in runs:
        found += db.fetch(_STORED, (sid, first << SHIFT, (last << SHIFT) + BASE - 1))
    return found


def _children(stored: list[Row], fresh: list[Row]) -> list[Row]:
    """The level-1 buckets after the merge: the stored ones with the fresh ones merged in."""
    return _merged_in(stored, fresh) if stored else fresh


def _upsert(db: Db, conflict: str, level: int, rows: list[Row]) -> None:
    """Rows of ``level`` in statements of ``_MANY``, the rest one by one."""
    whole = len(rows) - len(rows) % _MANY
    if whole:
        flat = list(chain.from_iterable(rows[:whole]))
        size = _MANY * _FIELDS
        many = _INTO + ", ".join([_row(level)] * _MANY) + conflict
        db.executemany(many, [flat[i : i + size] for i in range(0, len(flat), size)])
    if whole < len(rows):
        db.executemany(_INTO + _row(level) + conflict, rows[whole:])


def refresh_upper(db: Db, spans: Mapping[int, tuple[int, int]], levels: Sequence[int] = LEVELS[1:]) -> None:
    """Recompute ``levels`` (default 2..) over steps ``lo..hi`` of each series from the level beneath."""
    for sid, (lo, hi) in spans.items():
        for level in levels:
            plo, phi = lo // width(level), hi // width(level)
            up, last = _LEVEL_UP[level]
            db.execute(up, (sid, plo * BASE, phi * BASE + BASE - 1))
            db.execute(last, (sid,) * 6 + (plo, phi))


_LEVEL_UP = {level: _level_up(level) for level in LEVELS[1:]}
