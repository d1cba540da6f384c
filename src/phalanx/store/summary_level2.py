"""Level 2 of a scalar series' summary computed in memory, at ingest, from the level-1 buckets
(``store.summary_writes``): the rows the SQL recompute (``summary_writes.refresh_upper``) would
store, without its two statements per batch (an upsert grouping level 1, then an update with five
correlated lookups per bucket), which were a twelfth of what ingest paid per point. The level-1
buckets are those the batch aggregated, merged here with the ones stored before it as the merge's
upsert merges them in the database (``merged``); ``plain`` says when the result is the database's
to the bit (no NaN or NULL times, no NaN min or max; on PostgreSQL, no -0.0 either). Standard library
only."""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Callable, Sequence
from itertools import chain, islice, repeat
from operator import itemgetter, not_, sub
from typing import Any

SHIFT = 4  # a level's bucket holds 2**SHIFT buckets of the level beneath
# A bucket as a row of the summary's upsert: (series id, bucket, n, min_value, max_value, first_step,
# last_step, min_time, max_time, first_value, last_value, last_time, min_step, max_step)
Row = tuple[Any, ...]
_BUCKET = itemgetter(1)
_TIMES = itemgetter(7, 8, 11)
_COMPARED = itemgetter(3, 4, 7, 8)  # min, max, min_time, max_time
_EXTREMES = itemgetter(3, 4)  # min, max


def plain(rows: Sequence[Row], signed_zeros: bool) -> bool:
    """Whether the databases aggregate these buckets as Python does: every time a number (SQLite
    stores a NaN as NULL, which its min() skips and its comparisons never take; PostgreSQL sorts NaN
    above every number; Python's min() depends on where a NaN stands), and, where the database keeps
    the sign of a zero (``signed_zeros``: PostgreSQL), no -0.0 among the mins, maxes and times (its
    min() of 0.0 and -0.0 is whichever it reads last, in an order of its plan's). Other series take
    the SQL recompute."""
    try:
        if math.isnan(sum(chain.from_iterable(map(_TIMES, rows)))):
            return False
    except TypeError:  # a NULL
        return False
    # a NaN min or max: ingest never stores one, but migration 0003's backfill did on PostgreSQL (its
    # max() of a bucket holding a NaN point is NaN), whose max() then takes it where Python's may not.
    # ``filter(None, ...)`` drops the NULLs (an all-NaN bucket's) and the zeros (no NaN); not a sum: an
    # inf and a -inf would make a NaN of it, and every series holding both would take the recompute
    if any(map(math.isnan, filter(None, chain.from_iterable(map(_EXTREMES, rows))))):
        return False
    if signed_zeros:  # the zeros picked by a C loop (``not_``), their signs looked at
        zeros = filter(not_, chain.from_iterable(map(_COMPARED, rows)))
        return not any(v is not None and math.copysign(1.0, v) < 0 for v in zeros)
    return True


def merged(old: Row, new: Row) -> Row:
    """Stored bucket ``old`` with ``new``'s points added, as ``summary_writes``' merge upsert sets
    it (every SET reads the stored row; a NULL min or max is no min or max)."""
    sid, bucket, n0, low0, high0, first0, last0, tmin0, tmax0, fv0, lv0, tl0, at_low0, at_high0 = old
    _, _, n1, low1, high1, first1, last1, tmin1, tmax1, fv1, lv1, tl1, at_low1, at_high1 = new
    low = low1 is not None and (low0 is None or low1 < low0)
    high = high1 is not None and (high0 is None or high1 > high0)
    first = first1 < first0
    last = last1 >= last0
    return (
        sid,
        bucket,
        n0 + n1,
        low1 if low else low0,
        high1 if high else high0,
        first1 if first else first0,
        last1 if last else last0,
        tmin1 if tmin1 < tmin0 else tmin0,
        tmax1 if tmax1 > tmax0 else tmax0,
        fv1 if first else fv0,
        lv1 if last else lv0,
        tl1 if last else tl0,
        at_low1 if low else at_low0,
        at_high1 if high else at_high0,
    )


def level2(children: Sequence[Row]) -> list[Row]:
    """The level-2 buckets over ``children``: one series' level-1 buckets in bucket order, every
    one stored under the level-2 buckets they fall in. As the SQL recompute makes them: n, min,
    max, steps and times over the children (a NULL min or max skipped); the first value from the
    child holding the first step, the last value and time from the one holding the last step; the
    min's (max's) step: the lowest step of a child holding the min (max), i.e. the first such child
    in bucket order (a child's steps lie in its bucket). Each gathered for every bucket by a C loop
    over the children's slices, as level 1 is."""
    parents = [bucket >> SHIFT for bucket in map(_BUCKET, children)]
    starts, i, count = [], 0, len(parents)
    while i < count:
        starts.append(i)
        i = bisect_left(parents, parents[i] + 1, i + 1, count)
    ends = [*islice(starts, 1, None), count]
    lasts = list(map(sub, ends, repeat(1)))
    cuts = list(map(slice, starts, ends))
    (sids, _, ns, lows, highs, firsts, steps, tmins, tmaxs, fvs, lvs, tls, at_lows, at_highs) = zip(
        *children, strict=True
    )
    low, at_low = _extremes(min, lows, at_lows, cuts, starts, ends)
    high, at_high = _extremes(max, highs, at_highs, cuts, starts, ends)
    return list(
        zip(
            map(sids.__getitem__, starts),
            map(parents.__getitem__, starts),
            map(sum, map(ns.__getitem__, cuts)),
            low,
            high,
            map(firsts.__getitem__, starts),
            map(steps.__getitem__, lasts),
            map(min, map(tmins.__getitem__, cuts)),
            map(max, map(tmaxs.__getitem__, cuts)),
            map(fvs.__getitem__, starts),
            map(lvs.__getitem__, lasts),
            map(tls.__getitem__, lasts),
            at_low,
            at_high,
            strict=True,
        )
    )


def _extremes(
    pick: Callable[[Sequence[Any]], Any],
    column: tuple[Any, ...],
    at: tuple[Any, ...],
    cuts: list[slice],
    starts: list[int],
    ends: list[int],
) -> tuple[list[Any], list[Any]]:
    """Per slice of ``column``, its min (max): NULLs skipped, None where all are; and the step ``at``
    the first child holding it."""
    if None in column:  # a child of NaN points only: no min or max (rare), bucket by bucket
        found = [pick(kept) if (kept := [v for v in column[cut] if v is not None]) else None for cut in cuts]
        return found, [
            None if v is None else at[column.index(v, a, b)]
            for v, a, b in zip(found, starts, ends, strict=True)
        ]
    picked = list(map(pick, map(column.__getitem__, cuts)))
    return picked, list(map(at.__getitem__, map(column.index, picked, starts, ends)))
