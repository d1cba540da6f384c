"""Appending a batch's points to their series' chunks (``store.sql.points`` says why points are
kept as chunks and in which order): written once for every door (``store.db.Db``), the full store
and a supervisor's ``sqlite3`` writer run the same statements. Standard library only."""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
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


def _row(sid: int, seq: int, replica: str, rank: int | None, cols: Columns) -> tuple[Any, ...]:
    """The chunk's columns in ``_INSERT``'s order."""
    steps = listed(cols[0])
    if in_order(steps):  # a training loop's: its ends
        first, last = steps[0], steps[-1]
    else:
        first, last = min(steps), max(steps)
    return (sid, seq, first, last, len(steps), replica, rank, encode(*cols))


def lock_series(db: Db, sids: Sequence[int]) -> None:
    """On PostgreSQL, lock the series' rows in one order (every writer does: no deadlock), so one
    writer at a time picks a series' next chunk or its attempt; SQLite's writer holds the file."""
    if db.dialect == "postgresql" and sids:
        db.fetch(f"SELECT id FROM series WHERE id IN ({marks(len(sids))}) ORDER BY id FOR UPDATE", sids)


def append(db: Db, pieces: Iterable[Piece]) -> None:
    """Store the pieces (in arrival order) as chunks after each series' last one."""
    per_series: dict[int, list[Piece]] = {}
    for p in pieces:
        if len(p.steps):
            per_series.setdefault(p.series_id, []).append(p)
    if not per_series:
        return
    sids = sorted(per_series)
    lock_series(db, sids)
    rows: list[tuple[Any, ...]] = []
    for sid in sids:
        found = db.fetch(_LAST, (sid,))
        last = found[0] if found else None
        seq = -1 if last is None else int(last[0])
        runs = _runs(per_series[sid])
        if last is not None and int(last[1]) < SMALL and runs and runs[0][:2] == (last[2], last[3]):
            replica, rank, (steps, values, times) = runs[0]
            blob = db.fetch(_DATA, (sid, seq))[0][0]
            old_steps, old_values, old_times = decode(bytes(blob), int(last[1]))
            room = MAX_CHUNK - len(old_steps)
            grown = ([*old_steps, *steps[:room]], [*old_values, *values[:room]], [*old_times, *times[:room]])
            rewrite(db, sid, seq, replica, rank, grown)
            runs[0] = (replica, rank, (steps[room:], values[room:], times[room:]))
        for replica, rank, (steps, values, times) in runs:
            for start in range(0, len(steps), MAX_CHUNK):
                seq += 1
                end = start + MAX_CHUNK
                rows.append(
                    _row(sid, seq, replica, rank, (steps[start:end], values[start:end], times[start:end]))
                )
    if rows:
        db.executemany(_INSERT, rows)


def _runs(pieces: list[Piece]) -> list[tuple[str, int | None, Columns]]:
    """Consecutive pieces of one writer joined: (replica, rank, (steps, values, times)), as arrays
    (joining arrays is a copy of their bytes; a list would box every point)."""
    runs: list[tuple[str, int | None, tuple[array[int], array[float], array[float]]]] = []
    for p in pieces:
        if not runs or runs[-1][:2] != (p.replica, p.rank):
            runs.append((p.replica, p.rank, (array("q"), array("d"), array("d"))))
        steps, values, times = runs[-1][2]
        steps.extend(_as_array("q", p.steps))
        values.extend(_as_array("d", p.values))
        times.extend(_as_array("d", p.times))
    return [(replica, rank, cols) for replica, rank, cols in runs]


def _as_array(code: str, column: Sequence[Any]) -> array[Any]:
    return column if isinstance(column, array) and column.typecode == code else array(code, column)


def rewrite(db: Db, sid: int, seq: int, replica: str, rank: int | None, cols: Columns) -> None:
    """Replace the points of chunk ``seq`` of series ``sid``."""
    _, _, first, last, n, _, _, data = _row(sid, seq, replica, rank, cols)
    db.execute(_REWRITE, (first, last, n, replica, rank, data, sid, seq))
