"""A multi-resolution summary of every scalar series, so a chart never reads the raw points.

Why: a chart is at most a couple of thousand pixels wide, yet a series may hold millions of points;
reading them all per request made the Scalars tab of a big run seconds slow. So the store keeps, per
series and for buckets of 16, 256, 4096, 65536 and 1048576 steps (levels 1-5), each bucket's
point count, min, max, first and last step, and the value and time at its last step
(``scalar_summary``). A view of N pixels then reads about N rows of the right level, whatever the
size of the series, and a zoomed view reads only the buckets in its window.

The summary is maintained at ingest, in the same transaction as the points
(``summary_writes.write``): level 1 is aggregated from the batch's points in memory and merged into
the stored buckets, level 2 is computed from level 1 in memory and the levels above are recomputed
in SQL from the level beneath, over the buckets the batch touched, so the result is exact whatever
order batches arrive in; ``rebuild`` starts a series' summary over
from its points after a later attempt replaced some of them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import Connection, text

from phalanx.downsample import downsample_indices
from phalanx.store import summary_writes
from phalanx.store.sql import points
from phalanx.store.sql.driver import DriverDb, fetch
from phalanx.store.summary_writes import LEVELS, width


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
        buckets = summary_writes.aggregate([(sid, found.steps, found.values, found.times)])
        summary_writes.write(DriverDb(conn), buckets)


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
