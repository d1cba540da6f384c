"""A scalar series' chunk of points as stored (``scalar_chunks.data``) and read back: int64 steps,
float64 values and float64 times, byte-shuffled and zlib-compressed (docs/store.md). Standard
library only: the store's SQL (``store.sql.points``) writes and reads chunks with it, and so does the
lean reader (`phalanx metrics` without SQLAlchemy, ``store.lite``)."""

from __future__ import annotations

import sys
import zlib
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import islice
from operator import lt
from typing import Any

_LEVEL = 1  # zlib's fastest level: as small as level 6 on shuffled columns, at ingest speed
_WORD = 8
Columns = tuple[Sequence[int], Sequence[float], Sequence[float]]  # steps, values, times
# a query's rows through a driver's cursor ('?' placeholders)
Fetch = Callable[[str, tuple[Any, ...]], Sequence[Sequence[Any]]]


def encode(steps: Sequence[int], values: Sequence[float], times: Sequence[float]) -> bytes:
    """The points as one blob: int64 steps, float64 values and times (little-endian), each byte of
    the 8-byte words gathered with the same byte of the others (a shuffle: the high bytes of steps
    and times that change slowly become long runs), then zlib. OverflowError for a step beyond 64
    bits (the store's UsageError)."""
    s, v, t = array("q", steps), array("d", values), array("d", times)
    if sys.byteorder == "big":
        for column in (s, v, t):
            column.byteswap()
    raw = s.tobytes() + v.tobytes() + t.tobytes()
    return zlib.compress(b"".join(raw[i::_WORD] for i in range(_WORD)), _LEVEL)


def decode(blob: bytes, n: int) -> tuple[array[int], array[float], array[float]]:
    """(steps, values, times) of a blob ``encode`` made of ``n`` points."""
    planes = zlib.decompress(blob)
    words = 3 * n
    if len(planes) != _WORD * words:
        raise ValueError(f"a scalar chunk holds {len(planes)} bytes, not the {_WORD * words} of {n} points")
    raw = bytearray(len(planes))
    for i in range(_WORD):
        raw[i::_WORD] = planes[i * words : (i + 1) * words]
    view = memoryview(raw)
    steps, values, times = array("q"), array("d"), array("d")
    steps.frombytes(view[: _WORD * n])
    values.frombytes(view[_WORD * n : 2 * _WORD * n])
    times.frombytes(view[2 * _WORD * n :])
    if sys.byteorder == "big":
        for column in (steps, values, times):
            column.byteswap()
    return steps, values, times


@dataclass
class Points:
    """A series' points in order: by step, then in the order they arrived."""

    steps: list[int]
    values: list[float]
    times: list[float]


def read(fetch: Fetch, sid: int, lo: int | None = None, hi: int | None = None) -> Points:
    """The points of series ``sid`` with ``lo <= step <= hi`` (None: no bound), in order."""
    sql = "SELECT n, data FROM scalar_chunks WHERE series_id = ?"
    params: list[Any] = [sid]
    if lo is not None:
        sql += " AND last_step >= ?"
        params.append(lo)
    if hi is not None:
        sql += " AND first_step <= ?"
        params.append(hi)
    rows = fetch(sql + " ORDER BY seq", tuple(params))
    return ordered([decode(blob, int(n)) for n, blob in rows], lo, hi)


def last(fetch: Fetch, sid: int, n: int) -> Points:
    """The last ``n`` points by step of series ``sid``, in order; reads the chunks that hold them,
    not the series."""
    if n <= 0:
        return Points([], [], [])
    meta = fetch(
        "SELECT seq, n, first_step, last_step FROM scalar_chunks WHERE series_id = ? ORDER BY last_step DESC",
        (sid,),
    )
    chosen: list[int] = []
    count = 0
    low: int | None = None
    for i, (seq, size, first, _) in enumerate(meta):
        chosen.append(int(seq))
        count += int(size)
        low = int(first) if low is None else min(low, int(first))
        following = meta[i + 1][3] if i + 1 < len(meta) else None
        # enough points, and none of the chunks left can hold a step this high
        if count >= n and (following is None or int(following) < low):
            break
    if not chosen:
        return Points([], [], [])
    marks = ", ".join("?" * len(chosen))
    rows = fetch(
        f"SELECT n, data FROM scalar_chunks WHERE series_id = ? AND seq IN ({marks}) ORDER BY seq",
        (sid, *chosen),
    )
    found = ordered([decode(blob, int(size)) for size, blob in rows], None, None)
    return Points(found.steps[-n:], found.values[-n:], found.times[-n:])


def latest_replica(fetch: Fetch, sid: int) -> str | None:
    """The replica that reported the highest step of series ``sid``."""
    rows = fetch(
        "SELECT replica FROM scalar_chunks WHERE series_id = ? ORDER BY last_step DESC, seq DESC LIMIT 1",
        (sid,),
    )
    return str(rows[0][0]) if rows else None


def ordered(
    chunks: Sequence[tuple[array[int], array[float], array[float]]], lo: int | None, hi: int | None
) -> Points:
    steps: list[int] = []
    values: list[float] = []
    times: list[float] = []
    for s, v, t in chunks:
        steps.extend(s)
        values.extend(v)
        times.extend(t)
    if (lo is not None or hi is not None) and steps:
        low = min(steps) if lo is None else lo
        high = max(steps) if hi is None else hi
        keep = [i for i, step in enumerate(steps) if low <= step <= high]
        if len(keep) < len(steps):
            steps, values, times = pick((steps, values, times), keep)
    if not in_order(steps):  # a stable sort: ties keep their arrival order
        steps, values, times = pick((steps, values, times), sorted(range(len(steps)), key=steps.__getitem__))
    return Points(steps, values, times)


def in_order(xs: Sequence[Any]) -> bool:
    """Whether ``xs``, numbers without NaN (steps; times known to hold none: with a NaN the answer
    means nothing), never goes down. A sort of ordered numbers is one C comparison each, and the
    sorted list is then the very same objects: a third of what a comparison per pair through
    ``map`` costs (issue 42). Numbers out of order cost a sort (what a training loop never reports;
    a read sorts them next anyway)."""
    numbers = listed(xs)
    return numbers == sorted(numbers)


def rising(xs: Sequence[Any]) -> bool:
    """Whether ``xs`` only goes up, never repeating (a C loop that stops at the first step not up)."""
    return all(map(lt, xs, islice(xs, 1, None)))


def listed(column: Sequence[Any]) -> list[Any]:
    """A column as a list: each number made an object once, not at every look (an order check, a
    min, a slice)."""
    return column.tolist() if isinstance(column, array) else list(column)


def pick(cols: Columns, keep: Sequence[int]) -> tuple[list[int], list[float], list[float]]:
    """The points at positions ``keep`` of the columns, in that order."""
    s, v, t = cols
    return [s[i] for i in keep], [v[i] for i in keep], [t[i] for i in keep]
