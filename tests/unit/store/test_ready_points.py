"""A batch's points made ready before its transaction (``event_writes.prepare_points``, issue 42:
ingesters working at once share the cores and queue for SQLite's one writer only for their SQL)
store the very rows the transaction makes on its own: chunks (a small last chunk of the same
writer taking the next points, several series in one record, runs longer than a chunk, steps out
of order, NaN) and the summary above them."""

from __future__ import annotations

import math
import random
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from phalanx.config import Settings
from phalanx.domain import Event, EventKind
from phalanx.spool import encode_points
from phalanx.store import open_store
from phalanx.store.batch import ScalarBlock, collect
from phalanx.store.chunk_writes import MAX_CHUNK, SMALL
from phalanx.store.db import SqliteDb
from phalanx.store.event_writes import append_scalars, prepare_points, series_ids
from phalanx.store.lite_writer import LiteWriter
from phalanx.store.migrations import HEAD

Point = tuple[str, str, int, float, float]


def _event(
    exp: str, seq: int, points: list[Point], replica: str = "worker-0", attempt: int | None = None
) -> Event:
    return Event(
        exp, EventKind.SCALAR, encode_points(points), replica=replica, rank=0, stream="s", seq=seq,
        time=1.0, attempt=attempt,
    )  # fmt: skip


def _batches(exp: str) -> list[list[Event]]:
    """Batches as a replica's flushes make them, and a second writer between them."""
    rng = random.Random(5)

    def loop(title: str, start: int, n: int) -> list[Point]:
        return [
            (title, "m", s, 2.0 * math.exp(-s / 900) + rng.gauss(0, 0.05), 1e9 + s)
            for s in range(start, start + n)
        ]

    few = loop("loss", 0, SMALL // 2)  # leaves a small last chunk: the next batch of its writer joins it
    many = loop("loss", SMALL // 2, 2 * MAX_CHUNK + 17) + loop("acc", 0, 300)  # two series in a record
    odd = [("loss", "m", s, math.nan if s % 7 == 0 else float(s), 2e9 - s) for s in (9000, 8200, 8999, 8200)]
    other = loop("loss", 20_000, 50)  # another writer's points after a small chunk of the first
    return [
        [_event(exp, 0, few)],
        [_event(exp, 1, many), _event(exp, 2, odd)],
        [_event(exp, 0, other, replica="worker-1")],
        [_event(exp, 3, loop("loss", 30_000, 10))],
    ]


def _ingest(home: Path, ready: bool) -> Path:
    """The batches ingested into a new store of ``home``, their points made ready or not."""
    settings = Settings(home=home)
    full = open_store(settings)
    exp = full.create_experiment(name="x", project="p").id
    full.close()
    conn = sqlite3.connect(home / "phalanx.db", isolation_level=None)
    db = SqliteDb(conn)
    for events in _batches(exp):
        blocks: Sequence[ScalarBlock] = collect(events).scalars
        points = prepare_points(blocks) if ready else None
        assert (points is not None) == ready
        conn.execute("BEGIN IMMEDIATE")
        ids = series_ids(db, {(b.experiment_id, t, s) for b in blocks for t, s in b.keys})
        append_scalars(db, blocks, ids, points)
        conn.execute("COMMIT")
    conn.close()
    return home / "phalanx.db"


def _rows(store_file: Path) -> dict[str, list[tuple[Any, ...]]]:
    conn = sqlite3.connect(store_file)
    try:
        return {
            table: conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2, 3").fetchall()
            for table in ("scalar_chunks", "scalar_summary")
        }
    finally:
        conn.close()


def test_points_made_ready_before_the_transaction_store_the_rows_it_makes_itself(tmp_path: Path) -> None:
    expected = _rows(_ingest(tmp_path / "made", ready=False))
    got = _rows(_ingest(tmp_path / "ready", ready=True))
    assert got == expected
    chunks = expected["scalar_chunks"]
    assert len(chunks) >= 5 and max(row[4] for row in chunks) == MAX_CHUNK  # full chunks, and the rest
    assert {row[5] for row in chunks} == {"worker-0", "worker-1"}
    assert len(expected["scalar_summary"]) > 100


def test_points_of_an_attempt_are_left_to_the_transaction() -> None:
    """A later attempt's points replace an earlier one's steps, which only the transaction sees."""
    blocks = collect([_event("e", 0, [("loss", "m", 1, 1.0, 1.0)], attempt=1)]).scalars
    assert prepare_points(blocks) is None
    assert prepare_points([]) is None


def test_the_lean_writer_stores_a_resent_batch_once(tmp_path: Path) -> None:
    """A batch of which some events were stored before (a writer re-sent them) is collected again
    in the transaction for the new ones only: what was made ready for all of them is not used."""
    settings = Settings(home=tmp_path / "h")
    full = open_store(settings)
    exp = full.create_experiment(name="x", project="p").id
    lite = LiteWriter.open(settings.database_url, HEAD, lambda: full)
    assert lite is not None
    first = Event(
        exp, EventKind.SCALAR, encode_points([("loss", "m", 0, 1.0, 1.0)]), stream="s", seq=0, time=1.0
    )
    later = Event(
        exp, EventKind.SCALAR, encode_points([("loss", "m", 1, 2.0, 2.0)]), stream="s", seq=1, time=1.0
    )
    assert lite.ingest_batch("s", 0, 10, 0, [first]) == 1
    assert lite.ingest_batch("s", 10, 20, 1, [first, later]) == 1
    series = full.metrics(exp, "loss")["loss"]["m"]
    assert (series.steps, series.values) == ([0, 1], [1.0, 2.0])
    lite.close()
    full.close()
