"""Shrink a long scalar series to a few thousand points without hiding its peaks.

A chart is a few thousand pixels wide, so sending 100,000 points per series to a browser only costs
time. Averaging would flatten a loss spike, the thing a user is looking for; instead every bucket of
consecutive points keeps its minimum and its maximum (in x order), and the first and the last point are
always kept. A series no longer than ``max_points`` comes back exactly as it was.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def downsample_indices(values: Sequence[float], max_points: int) -> list[int]:
    """Indices (ascending) of the points to keep so that at most ``max_points`` remain.

    Args:
        values: the y values, in x order.
        max_points: the most points wanted; values below 4 are raised to 4 (first, last, a min, a max).

    Returns every index when ``len(values) <= max_points``. Otherwise the first and last index plus,
    for each of ``(max_points - 2) // 2`` buckets, the indices of the bucket's smallest and largest
    finite value. Non-finite values (NaN, inf) are never chosen as a bucket's min or max, but a
    bucket made only of them keeps its first point so that the gap stays visible.
    """
    n = len(values)
    max_points = max(4, int(max_points))
    if n <= max_points:
        return list(range(n))
    inner_first, inner_last = 1, n - 1  # [1, n-1): the points between the kept ends
    buckets = (max_points - 2) // 2
    width = (inner_last - inner_first) / buckets
    keep: list[int] = [0]
    for b in range(buckets):
        start = inner_first + int(b * width)
        stop = inner_first + int((b + 1) * width) if b < buckets - 1 else inner_last
        if stop <= start:
            continue
        lo_i = hi_i = -1
        lo = math.inf
        hi = -math.inf
        for i in range(start, stop):
            v = values[i]
            if not math.isfinite(v):
                continue
            if v < lo:
                lo, lo_i = v, i
            if v > hi:
                hi, hi_i = v, i
        if lo_i < 0:  # nothing finite in this bucket
            keep.append(start)
        elif lo_i == hi_i:
            keep.append(lo_i)
        else:
            keep.extend(sorted((lo_i, hi_i)))
    keep.append(n - 1)
    return keep


def downsample(xs: Sequence[float], ys: Sequence[float], max_points: int) -> tuple[list[float], list[float]]:
    """The (x, y) points :func:`downsample_indices` keeps; exact when the series is short."""
    if len(xs) != len(ys):
        raise ValueError(f"x and y differ in length ({len(xs)} != {len(ys)})")
    idx = downsample_indices(ys, max_points)
    return [xs[i] for i in idx], [ys[i] for i in idx]
