"""Appending a batch's points to their series' chunks (``store.sql.points`` says why points are
kept as chunks and in which order): written once for every door (``store.db.Db``), the full store
and a supervisor's ``sqlite3`` writer run the same statements. Standard library only."""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from phalanx.store.chunks import Columns, decode, encode, in_order, listed
from phalanx.store.db import Db, marks

MAX_CHUNK = 4096  # points a chunk holds at most: a zoomed read decodes a few of them, not a series
SMALL = 256  # a series' last chunk below this many points takes the next points of its writer

_LAST = "SELECT seq, n, replica, rank FROM scalar_chunks WHERE series_id = ? ORDER BY seq DESC LIMIT 1"
_DATA = "SELECT data FROM scalar_chunks WHERE series_id = ? AND seq = ?"
_INSERT = (
    "INSERT INTO scalar_chunks (series_id, seq, first_step, last_step, n, replica, rank, data)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
_REWRITE = (
    "UPDATE scalar_chunks SET first_step = ?, last_step = ?, n = ?, replica = ?, rank = ?, data = ?"
    " WHERE series_id = ? AND seq = ?"
)


@dataclass
class Piece:
    """Points of one series from one writer, in the order they arrived."""

    series_id: int
    replica: str
    rank: int | None
    steps: Sequence[int]
    values: Sequence[float]
    times: Sequence[float]


Chunk = tuple[int, int, int, bytes]  # (first step, last step, n, blob): a chunk's columns but its ids


@dataclass(frozen=True)
class Run:
    """Consecutive points of one series from one writer, as arrays (joining arrays is a copy of
    their bytes; a list would box every point), and, once ``encoded``, its chunks: one per
    MAX_CHUNK points, cut from its first point."""

    replica: str
    rank: int | None
    cols: tuple[array[int], array[float], array[float]]
    chunks: tuple[Chunk, ...] | None = None


def _chunk(cols: Columns) -> Chunk:
    steps = listed(cols[0])
    if in_order(steps):  # a training loop's: its ends
        first, last = steps[0], steps[-1]
    else:
        first, last = min(steps), max(steps)
    return (first, last, len(steps), encode(*cols))


def _cut(cols: Columns) -> tuple[Chunk, ...]:
    steps, values, times = cols
    return tuple(
        _chunk((steps[i : i + MAX_CHUNK], values[i : i + MAX_CHUNK], times[i : i + MAX_CHUNK]))
        for i in range(0, len(steps), MAX_CHUNK)
    )


def lock_series(db: Db, sids: Sequence[int]) -> None:
    """On PostgreSQL, lock the series' rows in one order (every writer does: no deadlock), so one
    writer at a time picks a series' next chunk or its attempt; SQLite's writer holds the file."""
    if db.dialect == "postgresql" and sids:
        db.fetch(f"SELECT id FROM series WHERE id IN ({marks(len(sids))}) ORDER BY id FOR UPDATE", sids)


def append(db: Db, pieces: Iterable[Piece]) -> None:
    """Store the pieces (in arrival order) as chunks after each series' last one."""
    append_runs(db, runs(pieces))


def runs(pieces: Iterable[Piece]) -> dict[int, list[Run]]:
    """Per series id, its pieces' points (in arrival order), consecutive ones of one writer joined."""
    per_series: dict[int, list[Run]] = {}
    for p in pieces:
        if not len(p.steps):
            continue
        held = per_series.setdefault(p.series_id, [])
        if not held or (held[-1].replica, held[-1].rank) != (p.replica, p.rank):
            held.append(Run(p.replica, p.rank, (array("q"), array("d"), array("d"))))
        steps, values, times = held[-1].cols
        steps.extend(_as_array("q", p.steps))
        values.extend(_as_array("d", p.values))
        times.extend(_as_array("d", p.times))
    return per_series


def encoded(per_series: Mapping[int, list[Run]]) -> dict[int, list[Run]]:
    """The runs with their chunks compressed: what costs most of a batch's points, done before its
    transaction (``event_writes.prepare_points``); the series' stored last chunk may still take a
    run's first points there (``append_runs``), which then cuts that run again."""
    return {sid: [replace(run, chunks=_cut(run.cols)) for run in held] for sid, held in per_series.items()}


def append_runs(db: Db, per_series: Mapping[int, list[Run]]) -> None:
    """Store the runs as chunks after each series' last one: a last chunk below SMALL points from
    the same writer first takes the series' first run's points (up to MAX_CHUNK)."""
    if not per_series:
        return
    sids = sorted(per_series)
    lock_series(db, sids)
    rows: list[tuple[Any, ...]] = []
    for sid in sids:
        found = db.fetch(_LAST, (sid,))
        last = found[0] if found else None
        seq = -1 if last is None else int(last[0])
        held = list(per_series[sid])  # never the caller's: a retried transaction starts over
        first = held[0]
        if last is not None and int(last[1]) < SMALL and (first.replica, first.rank) == (last[2], last[3]):
            steps, values, times = first.cols
            blob = db.fetch(_DATA, (sid, seq))[0][0]
            old_steps, old_values, old_times = decode(bytes(blob), int(last[1]))
            room = MAX_CHUNK - len(old_steps)
            grown = ([*old_steps, *steps[:room]], [*old_values, *values[:room]], [*old_times, *times[:room]])
            rewrite(db, sid, seq, first.replica, first.rank, grown)
            held[0] = Run(first.replica, first.rank, (steps[room:], values[room:], times[room:]))
        for run in held:
            for chunk in run.chunks if run.chunks is not None else _cut(run.cols):
                seq += 1
                rows.append((sid, seq, *chunk[:3], run.replica, run.rank, chunk[3]))
    if rows:
        db.executemany(_INSERT, rows)


def _as_array(code: str, column: Sequence[Any]) -> array[Any]:
    return column if isinstance(column, array) and column.typecode == code else array(code, column)


def rewrite(db: Db, sid: int, seq: int, replica: str, rank: int | None, cols: Columns) -> None:
    """Replace the points of chunk ``seq`` of series ``sid``."""
    first, last, n, data = _chunk(cols)
    db.execute(_REWRITE, (first, last, n, replica, rank, data, sid, seq))
