"""scalar_summary: a multi-resolution summary of every scalar series (charts that scale, #16)

Revision ID: 0003_server
Revises: 0002
Create Date: 2026-11-23 17:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy import Connection, text

revision = "0003_server"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "scalar_summary",
        sa.Column("series_id", sa.Integer(), nullable=False),
        sa.Column("level", sa.Integer(), nullable=False),
        sa.Column("bucket", sa.BigInteger(), nullable=False),
        sa.Column("n", sa.BigInteger(), nullable=False),
        sa.Column("min_value", sa.Float(), nullable=True),
        sa.Column("max_value", sa.Float(), nullable=True),
        sa.Column("first_step", sa.BigInteger(), nullable=False),
        sa.Column("last_step", sa.BigInteger(), nullable=False),
        sa.Column("first_value", sa.Float(), nullable=True),
        sa.Column("last_value", sa.Float(), nullable=True),
        sa.Column("last_time", sa.Float(), nullable=True),
        sa.Column("min_step", sa.BigInteger(), nullable=True),
        sa.Column("max_step", sa.BigInteger(), nullable=True),
        sa.Column("min_time", sa.Float(), nullable=True),
        sa.Column("max_time", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("series_id", "level", "bucket"),
        sqlite_with_rowid=False,  # a chart's window: one sequential read of the primary key
    )
    with op.batch_alter_table("experiments", schema=None) as batch_op:
        batch_op.add_column(sa.Column("notes", sa.Text(), nullable=True))
    _backfill(op.get_bind())  # series stored before this revision get their summary now


def downgrade() -> None:
    with op.batch_alter_table("experiments", schema=None) as batch_op:
        batch_op.drop_column("notes")
    op.drop_table("scalar_summary")


# --- the summary of the points a store held at this revision (one row per point in ``scalars``);
# kept here because later revisions store points otherwise (store.sql.points)


def _level1() -> tuple[str, str]:
    from phalanx.store.summary_writes import (  # why: Alembic loads every revision file
        _COLUMNS,
        _UPSERT,
        BASE,
        _bucket_expr,
    )

    # The bucket's aggregates first, then its last value and time in a second statement: SQLite's
    # "bare column" trick is undefined with several min()/max() in one query, and this is the same SQL
    # on both databases (an indexed lookup per bucket).
    LEVEL1 = f"""
        INSERT INTO scalar_summary ({_COLUMNS})
        SELECT series_id, 1, {_bucket_expr("step", BASE)}, count(*), min(value), max(value), min(step),
               max(step), min(time), max(time)
        FROM scalars WHERE series_id = :sid AND step >= :lo AND step <= :hi
        GROUP BY series_id, {_bucket_expr("step", BASE)}
        {_UPSERT}
    """
    LEVEL1_LAST = """
        UPDATE scalar_summary SET
            first_value = (SELECT s.value FROM scalars s WHERE s.series_id = :sid
                           AND s.step = scalar_summary.first_step ORDER BY s.id LIMIT 1),
            last_value = (SELECT s.value FROM scalars s WHERE s.series_id = :sid
                          AND s.step = scalar_summary.last_step ORDER BY s.id DESC LIMIT 1),
            last_time = (SELECT s.time FROM scalars s WHERE s.series_id = :sid
                         AND s.step = scalar_summary.last_step ORDER BY s.id DESC LIMIT 1),
            min_step = (SELECT s.step FROM scalars s WHERE s.series_id = :sid
                        AND s.step >= scalar_summary.first_step AND s.step <= scalar_summary.last_step
                        AND s.value = scalar_summary.min_value ORDER BY s.step LIMIT 1),
            max_step = (SELECT s.step FROM scalars s WHERE s.series_id = :sid
                        AND s.step >= scalar_summary.first_step AND s.step <= scalar_summary.last_step
                        AND s.value = scalar_summary.max_value ORDER BY s.step LIMIT 1)
        WHERE series_id = :sid AND level = 1 AND bucket >= :blo AND bucket <= :bhi
    """
    return LEVEL1, LEVEL1_LAST


def _backfill(conn: Connection) -> None:
    from phalanx.store.sql.driver import DriverDb  # why: Alembic loads every revision file
    from phalanx.store.summary_writes import refresh_upper, width  # why: Alembic loads every revision file

    series_ids = [int(s) for (s,) in conn.execute(text("SELECT DISTINCT series_id FROM scalars"))]
    spans: dict[int, tuple[int, int]] = {}
    for sid in series_ids:
        row = conn.execute(
            text("SELECT min(step), max(step) FROM scalars WHERE series_id = :sid"), {"sid": sid}
        ).first()
        if row is not None and row[0] is not None:
            spans[sid] = (int(row[0]), int(row[1]))
    level1, level1_last = _level1()
    first, first_last = text(level1), text(level1_last)
    for sid, (lo, hi) in spans.items():
        w = width(1)
        blo, bhi = lo // w, hi // w
        conn.execute(first, {"sid": sid, "lo": blo * w, "hi": bhi * w + w - 1})
        conn.execute(first_last, {"sid": sid, "blo": blo, "bhi": bhi})
    refresh_upper(DriverDb(conn), spans)  # the levels above, from level 1
