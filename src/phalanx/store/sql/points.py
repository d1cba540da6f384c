"""Where a scalar series' points live: chunks of columns, several thousand points to a row.

Why: one row per point cost 57.8 bytes in SQLite (a rowid, the replica's name as text on every
point, a second index on (series, step)) and one B-tree insert per point, which is where the
ingester spent half its time. Every read of points is per series and in step order, so the points
of a series are kept as chunks instead: a row of ``scalar_chunks`` (primary key (series id, seq),
``WITHOUT ROWID`` on SQLite, no other index) holds one writer's points (replica, rank) of one batch,
up to ``MAX_CHUNK`` of them, as int64 steps, float64 values and float64 times, byte-shuffled and
zlib-compressed (``store.chunks.encode``): a value is stored exactly as reported (NaN and -0.0
included), and a point costs about 9 bytes where its value is noise, almost nothing where steps and
times are regular.

Order: ``seq`` grows per series with each chunk written, so "step, then seq, then position in the
chunk" is the order the points arrived in, the order the old rowid gave to points of one step (a
step reported twice within an attempt keeps both, the later one last). A batch's points of a writer
whose chunk is the series' last and still small (``SMALL``) are added to that chunk instead of
starting one, so a live run reporting a few points a second does not pay a row per batch.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, delete, func, insert, select, update

from phalanx.store import chunks
from phalanx.store.chunks import Columns, Points, decode, encode, pick
from phalanx.store.sql.driver import fetch
from phalanx.store.sql.models import ScalarChunkRow, SeriesRow

C = ScalarChunkRow.c  # the chunk table's columns

MAX_CHUNK = 4096  # points a chunk holds at most: a zoomed read decodes a few of them, not a series
SMALL = 256  # a series' last chunk below this many points takes the next points of its writer


@dataclass
class Piece:
    """Points of one series from one writer, in the order they arrived."""

    series_id: int
    replica: str
    rank: int | None
    steps: Sequence[int]
    values: Sequence[float]
    times: Sequence[float]


def _row(sid: int, seq: int, replica: str, rank: int | None, cols: Columns) -> dict[str, Any]:
    steps = cols[0]
    return {
        "series_id": sid,
        "seq": seq,
        "first_step": min(steps),
        "last_step": max(steps),
        "n": len(steps),
        "replica": replica,
        "rank": rank,
        "data": encode(*cols),
    }


def append(conn: Connection, pieces: Iterable[Piece]) -> None:
    """Store the pieces (in arrival order) as chunks after each series' last one."""
    per_series: dict[int, list[Piece]] = {}
    for p in pieces:
        if len(p.steps):
            per_series.setdefault(p.series_id, []).append(p)
    if not per_series:
        return
    sids = sorted(per_series)
    if conn.dialect.name == "postgresql":  # one writer of a series' seq at a time, locked in one order
        conn.execute(
            select(SeriesRow.c.id).where(SeriesRow.c.id.in_(sids)).order_by(SeriesRow.c.id).with_for_update()
        )
    rows: list[dict[str, Any]] = []
    for sid in sids:
        last = conn.execute(
            select(C.seq, C.n, C.replica, C.rank).where(C.series_id == sid).order_by(C.seq.desc()).limit(1)
        ).first()
        seq = -1 if last is None else int(last[0])
        runs = _runs(per_series[sid])
        if last is not None and int(last[1]) < SMALL and runs and runs[0][:2] == (last[2], last[3]):
            replica, rank, (steps, values, times) = runs[0]
            blob = conn.execute(select(C.data).where(C.series_id == sid, C.seq == seq)).scalar_one()
            old_steps, old_values, old_times = decode(blob, int(last[1]))
            room = MAX_CHUNK - len(old_steps)
            grown = ([*old_steps, *steps[:room]], [*old_values, *values[:room]], [*old_times, *times[:room]])
            _rewrite(conn, sid, seq, replica, rank, grown)
            runs[0] = (replica, rank, (steps[room:], values[room:], times[room:]))
        for replica, rank, (steps, values, times) in runs:
            for start in range(0, len(steps), MAX_CHUNK):
                seq += 1
                end = start + MAX_CHUNK
                rows.append(
                    _row(sid, seq, replica, rank, (steps[start:end], values[start:end], times[start:end]))
                )
    if rows:
        conn.execute(insert(ScalarChunkRow), rows)


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


def _rewrite(conn: Connection, sid: int, seq: int, replica: str, rank: int | None, cols: Columns) -> None:
    """Replace the points of chunk ``seq`` of series ``sid``."""
    values = {k: v for k, v in _row(sid, seq, replica, rank, cols).items() if k not in ("series_id", "seq")}
    conn.execute(update(ScalarChunkRow).where(C.series_id == sid, C.seq == seq).values(values))


# --- reading -------------------------------------------------------------------------------------


def read(conn: Connection, sid: int, lo: int | None = None, hi: int | None = None) -> Points:
    """The points of series ``sid`` with ``lo <= step <= hi`` (None: no bound), in order."""
    return chunks.read(lambda sql, params: fetch(conn, sql, params), sid, lo, hi)


def last(conn: Connection, sid: int, n: int) -> Points:
    """The last ``n`` points by step, in order; reads the chunks that hold them, not the series."""
    return chunks.last(lambda sql, params: fetch(conn, sql, params), sid, n)


def latest_replica(conn: Connection, sid: int) -> str | None:
    """The replica that reported the series' highest step."""
    return chunks.latest_replica(lambda sql, params: fetch(conn, sql, params), sid)


def span(conn: Connection, sid: int) -> tuple[int, int] | None:
    """(lowest, highest) step of the series, None when it has no point."""
    row = conn.execute(
        select(func.min(C.first_step), func.max(C.last_step)).where(C.series_id == sid)
    ).first()
    return None if row is None or row[0] is None else (int(row[0]), int(row[1]))


# --- deleting --------------------------------------------------------------------------------------


def delete_steps(conn: Connection, sid: int, replica: str, lo: int, hi: int | None = None) -> int:
    """Delete the points ``replica`` reported to series ``sid`` at steps ``lo <= step`` (and ``<
    hi``); the chunks holding them are rewritten without them. Returns how many points went."""
    mine = (C.series_id == sid, C.replica == replica, C.last_step >= lo)
    q = select(C.seq, C.n, C.rank, C.data).where(*mine)
    if hi is not None:
        q = q.where(C.first_step < hi)
    gone = 0
    for seq, n, rank, blob in conn.execute(q).all():
        steps, values, times = decode(blob, int(n))
        keep = [i for i, step in enumerate(steps) if step < lo or (hi is not None and step >= hi)]
        gone += len(steps) - len(keep)
        where = (C.series_id == sid, C.seq == seq)
        if not keep:
            conn.execute(delete(ScalarChunkRow).where(*where))
        elif len(keep) < len(steps):
            _rewrite(conn, sid, int(seq), replica, rank, pick((steps, values, times), keep))
    return gone


def by_writer(conn: Connection, experiment_id: str) -> list[tuple[str, int, float]]:
    """(replica, step, value) of every point of the experiment, by replica then step: what each
    writer holds (the attempt rules are per replica; tests and diagnostics read this)."""
    rows = conn.execute(
        select(C.replica, C.n, C.data)
        .join(SeriesRow, SeriesRow.c.id == C.series_id)
        .where(SeriesRow.c.experiment_id == experiment_id)
        .order_by(C.series_id, C.seq)
    ).all()
    out: list[tuple[str, int, float]] = []
    for replica, n, blob in rows:
        steps, values, _ = decode(blob, int(n))
        out.extend((str(replica), s, v) for s, v in zip(steps, values, strict=True))
    return sorted(out, key=lambda r: (r[0], r[1]))
