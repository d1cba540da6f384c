"""The rows a batch of events writes that every door shares (``store.db.Db``: the full store and
a supervisor's ``sqlite3`` writer run the same statements): the events' keys, which make a batch
exactly-once (``new_events``), console lines, scalar points with their summary, and the position
ingest has read a spool file to. ``store.sql.events`` applies the other kinds. Standard library
only."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from phalanx.domain import Event
from phalanx.store import summary_writes as summary
from phalanx.store.batch import ScalarBlock
from phalanx.store.chunk_writes import Piece, Run, append, append_runs, encoded
from phalanx.store.chunk_writes import runs as chunk_runs
from phalanx.store.db import LEGACY_KEY, Db, no_gc
from phalanx.store.summary_level2 import Row

_STORED_SEQS = (
    "SELECT seq FROM event_keys WHERE stream = ? AND seq BETWEEN ? AND ?"
    " AND (experiment_id = ? OR experiment_id = ?)"
)
_INSERT_KEY = "INSERT INTO event_keys (stream, seq, experiment_id) VALUES (?, ?, ?)"
_INSERT_LOG = """INSERT INTO logs (experiment_id, replica, "offset", stream, text, time)
    VALUES (?, ?, ?, ?, ?, ?)"""
_SERIES_ID = "SELECT id FROM series WHERE experiment_id = ? AND title = ? AND series = ?"
_NEW_SERIES = "INSERT INTO series (experiment_id, title, series) VALUES (?, ?, ?) ON CONFLICT DO NOTHING"
_INSERT_PARAM = """INSERT INTO params (experiment_id, section, "key", value, replica, rank, time)
    VALUES (?, ?, ?, ?, ?, ?, ?)"""
_POSITION = 'SELECT "offset", seq FROM ingest_positions WHERE stream = ?'


def new_events(db: Db, events: Sequence[Event]) -> list[Event]:
    """The events whose (experiment, stream, seq) is not stored yet (nor repeated earlier in the
    batch); their keys are stored now. Events without a stream are always new. A key stored before
    the experiment was part of it (``LEGACY_KEY``) still counts for every experiment."""
    wanted: dict[tuple[str, str], set[int]] = defaultdict(set)
    for ev in events:
        if ev.stream:
            wanted[(ev.experiment_id, ev.stream)].add(ev.seq)
    # per (experiment, stream): the seqs already stored, fetched in one go
    held: dict[tuple[str, str], set[int]] = {}
    for (experiment_id, stream), seqs in wanted.items():
        rows = db.fetch(_STORED_SEQS, (stream, min(seqs), max(seqs), experiment_id, LEGACY_KEY))
        held[(experiment_id, stream)] = {int(r[0]) for r in rows}
    fresh: list[Event] = []
    keys: list[tuple[str, int, str]] = []
    for ev in events:
        if ev.stream:
            stored = held[(ev.experiment_id, ev.stream)]
            if ev.seq in stored:
                continue
            stored.add(ev.seq)
            keys.append((ev.stream, ev.seq, ev.experiment_id))
        fresh.append(ev)
    if keys:
        db.executemany(_INSERT_KEY, keys)
    return fresh


def insert_logs(db: Db, experiment_id: str, replica: str, lines: list[tuple[str, str, float]]) -> None:
    """A replica's console lines (text, stream, time), after those stored."""
    found = db.fetch(
        'SELECT max("offset") FROM logs WHERE experiment_id = ? AND replica = ?', (experiment_id, replica)
    )
    last = found[0][0] if found else None
    base = 0 if last is None else int(last) + 1
    db.executemany(
        _INSERT_LOG,
        [(experiment_id, replica, base + i, stream, text, t) for i, (text, stream, t) in enumerate(lines)],
    )


def series_ids(db: Db, keys: set[tuple[str, str, str]]) -> dict[tuple[str, str, str], int]:
    """Ids of (experiment, title, series), created on first use (concurrent creators are fine)."""
    ids: dict[tuple[str, str, str], int] = {}
    for key in keys:
        found = db.fetch(_SERIES_ID, key)
        if not found:
            db.execute(_NEW_SERIES, key)
            found = db.fetch(_SERIES_ID, key)
        ids[key] = int(found[0][0])
    return ids


SeriesKey = tuple[str, str, str]  # (experiment, title, series)


@dataclass(frozen=True)
class ReadyPoints:
    """A batch's points made ready before its transaction (``prepare_points``): cut into compressed
    chunks and aggregated into level-1 summary buckets, most of what its points cost, done while no
    lock is held, so that ingesters working at once (a supervisor's and its helper processes,
    ``phalanx.ingest_helpers``) share the cores instead of queueing for the database's one writer
    with that work. Series are numbered by their place in ``keys`` until the
    transaction knows their ids."""

    keys: tuple[SeriesKey, ...]
    runs: dict[int, list[Run]]
    buckets: dict[int, list[Row]]


def prepare_points(blocks: Sequence[ScalarBlock]) -> ReadyPoints | None:
    """The blocks' points made ready (``ReadyPoints``); None when some are of an attempt (the
    transaction reconciles those with what earlier attempts stored: ``store.sql.attempts``) or
    cannot be stored (left to the transaction, which says why)."""
    if not blocks or any(b.attempt is not None for b in blocks):
        return None
    places = {
        key: i
        for i, key in enumerate(dict.fromkeys((b.experiment_id, t, s) for b in blocks for t, s in b.keys))
    }
    pieces = list(_pieces(blocks, places))
    try:
        with no_gc():
            runs = encoded(chunk_runs(pieces))
            buckets = summary.aggregate((p.series_id, p.steps, p.values, p.times) for p in pieces)
    except OverflowError:  # a step beyond 64 bits: the transaction refuses it, as every door says it
        return None
    return ReadyPoints(tuple(places), runs, buckets)


def append_scalars(
    db: Db, blocks: Sequence[ScalarBlock], ids: dict[SeriesKey, int], ready: ReadyPoints | None = None
) -> None:
    """The blocks' points after their series' stored ones, and the summary over them. Points of
    later attempts are reconciled before (``store.sql.attempts``). ``ready``: the same blocks'
    points as ``prepare_points`` made them."""
    if ready is None:
        pieces = list(_pieces(blocks, ids))
        with no_gc():
            append(db, pieces)
            buckets = summary.aggregate((p.series_id, p.steps, p.values, p.times) for p in pieces)
    else:
        sid = [ids[key] for key in ready.keys]
        append_runs(db, {sid[i]: held for i, held in ready.runs.items()})
        buckets = {sid[i]: [(sid[i], *row[1:]) for row in rows] for i, rows in ready.buckets.items()}
    summary.write(db, buckets)


def _pieces(blocks: Sequence[ScalarBlock], ids: Mapping[SeriesKey, int]) -> Iterator[Piece]:
    """The points of each block per series, as columns, in the order they arrived."""
    for b in blocks:
        sids = [ids[(b.experiment_id, t, s)] for t, s in b.keys]
        if b.idx is None or len(sids) == 1:
            yield Piece(sids[0], b.replica, b.rank, b.steps, b.values, b.times)
            continue
        split: dict[int, tuple[list[int], list[float], list[float]]] = {}
        for k, step, v, t in zip(b.idx, b.steps, b.values, b.times, strict=True):
            cols = split.get(k)
            if cols is None:
                cols = split[k] = ([], [], [])
            cols[0].append(step)
            cols[1].append(v)
            cols[2].append(t)
        for k, (steps, values, times) in split.items():
            yield Piece(sids[k], b.replica, b.rank, steps, values, times)


def position(db: Db, stream: str) -> tuple[int, int] | None:
    """(byte offset, last seq) ingest committed for spool file ``stream``; None: none yet."""
    found = db.fetch(_POSITION, (stream,))
    return None if not found else (int(found[0][0]), int(found[0][1]))


def move_position(db: Db, stream: str, end: int, last_seq: int, *, new: bool) -> None:
    """Ingest has read ``stream`` to byte ``end`` (its last record ``last_seq``); ``new``: the
    stream had no position yet."""
    values: tuple[Any, ...] = (end, last_seq, time.time(), stream)
    if new:
        db.execute(
            'INSERT INTO ingest_positions ("offset", seq, updated_at, stream) VALUES (?, ?, ?, ?)', values
        )
    else:
        db.execute(
            'UPDATE ingest_positions SET "offset" = ?, seq = ?, updated_at = ? WHERE stream = ?', values
        )


def ingest(
    db: Db,
    stream: str,
    span: tuple[int, int],
    last_seq: int,
    events: Sequence[Event],
    write: Callable[[list[Event]], None],
) -> int | None:
    """A batch read from spool file ``stream`` between the byte offsets ``span`` (start, end):
    its new events handed to ``write``, and the position moved to (end, ``last_seq``), in the
    caller's transaction. How many events were new; None (nothing written) when the committed
    position is no longer ``start`` (another ingester got there first)."""
    held = position(db, stream)
    if (0 if held is None else held[0]) != span[0]:
        return None
    fresh = new_events(db, events) if events else []
    if fresh:
        write(fresh)
    move_position(db, stream, span[1], last_seq, new=held is None)
    return len(fresh)


def insert_params(db: Db, rows: Sequence[dict[str, Any]]) -> None:
    """Parameters as ``store.batch`` reads them from their events."""
    db.executemany(
        _INSERT_PARAM,
        [
            (
                p["experiment_id"],
                p["section"],
                p["key"],
                db.json(p["value"]),
                p["replica"],
                p["rank"],
                p["time"],
            )
            for p in rows
        ],
    )
