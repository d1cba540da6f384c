"""scalar_chunks: a series' points as compressed chunks, not a row (and an index entry) per point

Every stored point moves: per series, in the order the points arrived (the old rowid), one writer's
(replica, rank) consecutive points become chunks of up to ``chunk_writes.MAX_CHUNK``. The summary and
the series ids stay as they are. A NaN that SQLite kept as NULL becomes NaN again.

Revision ID: 0011_leanstore_scalar_chunks
Revises: 0010_teams_accounts
Create Date: 2026-11-26 14:00:00
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy import Connection, text

revision = "0011_leanstore_scalar_chunks"
down_revision = "0010_teams_accounts"
branch_labels = None
depends_on = None

_READ = 20_000  # old rows fetched at a time: a store of millions of points is moved in bounded memory


def upgrade() -> None:
    op.create_table(
        "scalar_chunks",
        sa.Column("series_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("seq", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("first_step", sa.BigInteger(), nullable=False),
        sa.Column("last_step", sa.BigInteger(), nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.Column("replica", sa.String(length=64), nullable=False),
        sa.Column("rank", sa.Integer(), nullable=True),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("series_id", "seq"),
        sqlite_with_rowid=False,  # the primary key is the table: no rowid, no second index
    )
    conn = op.get_bind()
    _move_points(conn)
    with op.batch_alter_table("scalars", schema=None) as batch_op:
        batch_op.drop_index("ix_scalars_series_step")
    op.drop_table("scalars")


def _old_runs(conn: Connection) -> Iterator[tuple[int, str, int | None, list[Any]]]:
    """(series id, replica, rank, rows) for each run of one writer's consecutive points of a
    series, at most MAX_CHUNK long, in the order the points arrived."""
    from phalanx.store.chunk_writes import MAX_CHUNK  # why: Alembic loads every revision file

    result = conn.execute(
        text("SELECT series_id, step, value, time, replica, rank FROM scalars ORDER BY series_id, id"),
        execution_options={"stream_results": True},
    )
    key: tuple[int, str, int | None] | None = None
    run: list[Any] = []
    while rows := result.fetchmany(_READ):
        for sid, step, value, time, replica, rank in rows:
            here = (int(sid), str(replica), None if rank is None else int(rank))
            if here != key or len(run) >= MAX_CHUNK:
                if key is not None and run:
                    yield (*key, run)
                key, run = here, []
            run.append((int(step), math.nan if value is None else float(value), float(time)))
    if key is not None and run:
        yield (*key, run)


def _move_points(conn: Connection) -> None:
    from phalanx.store.chunks import encode  # why: Alembic loads every revision file

    insert = text(
        "INSERT INTO scalar_chunks (series_id, seq, first_step, last_step, n, replica, rank, data) "
        "VALUES (:series_id, :seq, :first_step, :last_step, :n, :replica, :rank, :data)"
    )
    seqs: dict[int, int] = {}
    batch: list[dict[str, Any]] = []
    # the old rows stream in (a server-side cursor on PostgreSQL) while the chunks go out
    for sid, replica, rank, run in _old_runs(conn):
        seq = seqs[sid] = seqs.get(sid, -1) + 1
        steps = [r[0] for r in run]
        batch.append(
            {
                "series_id": sid,
                "seq": seq,
                "first_step": min(steps),
                "last_step": max(steps),
                "n": len(run),
                "replica": replica,
                "rank": rank,
                "data": encode(steps, [r[1] for r in run], [r[2] for r in run]),
            }
        )
        if len(batch) >= 64:
            conn.execute(insert, batch)
            batch = []
    if batch:
        conn.execute(insert, batch)


def downgrade() -> None:
    from phalanx.store.chunks import decode  # why: Alembic loads every revision file

    op.create_table(
        "scalars",
        sa.Column(
            "id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False
        ),
        sa.Column("series_id", sa.Integer(), nullable=False),
        sa.Column("step", sa.BigInteger(), nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        sa.Column("time", sa.Float(), nullable=False),
        sa.Column("replica", sa.String(length=64), nullable=False),
        sa.Column("rank", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("scalars", schema=None) as batch_op:
        batch_op.create_index("ix_scalars_series_step", ["series_id", "step"], unique=False)
    conn = op.get_bind()
    insert = text(
        "INSERT INTO scalars (series_id, step, value, time, replica, rank) "
        "VALUES (:series_id, :step, :value, :time, :replica, :rank)"
    )
    chunks = conn.execute(
        text("SELECT series_id, n, replica, rank, data FROM scalar_chunks ORDER BY series_id, seq")
    ).all()
    for sid, n, replica, rank, data in chunks:
        steps, values, times = decode(data, int(n))
        rows = [
            {
                "series_id": sid,
                "step": s,
                "value": None if v != v else v,
                "time": t,
                "replica": replica,
                "rank": rank,
            }
            for s, v, t in zip(steps, values, times, strict=True)
        ]
        conn.execute(insert, rows)
    op.drop_table("scalar_chunks")
