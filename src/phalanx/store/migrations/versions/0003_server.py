"""scalar_summary: a multi-resolution summary of every scalar series (charts that scale, #16)

Revision ID: 0003_server
Revises: 0002
Create Date: 2026-11-23 17:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

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
    from phalanx.store.sql.summary import backfill

    backfill(op.get_bind())  # series stored before this revision get their summary now


def downgrade() -> None:
    with op.batch_alter_table("experiments", schema=None) as batch_op:
        batch_op.drop_column("notes")
    op.drop_table("scalar_summary")
