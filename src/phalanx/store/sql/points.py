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

from sqlalchemy import Connection, delete, func, select

from phalanx.store import chunks
from phalanx.store.chunk_writes import rewrite
from phalanx.store.chunks import Points, decode, pick
from phalanx.store.sql.driver import DriverDb, fetch
from phalanx.store.sql.models import ScalarChunkRow, SeriesRow

C = ScalarChunkRow.c  # the chunk table's columns


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
            rewrite(DriverDb(conn), sid, int(seq), replica, rank, pick((steps, values, times), keep))
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
