"""per-replica attempt state of scalar series, each replica's starts (Kubernetes), texts' attempts

Revision ID: 0005_kattempt
Revises: 0004_requeue
Create Date: 2026-11-23 23:50:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005_kattempt"
down_revision = "0004_requeue"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("texts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("attempt", sa.Integer(), nullable=True))
    op.create_table(
        "series_attempts",
        sa.Column("series_id", sa.Integer(), nullable=False),
        sa.Column("replica", sa.String(length=64), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("attempt_step", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("series_id", "replica"),
    )
    # what 0004 kept per series holds for each replica that wrote to the series
    op.execute(
        "INSERT INTO series_attempts (series_id, replica, attempt, attempt_step)"
        " SELECT s.id, w.replica, s.attempt, s.attempt_step FROM series s JOIN"
        " (SELECT DISTINCT series_id, replica FROM scalars WHERE series_id IN"
        " (SELECT id FROM series WHERE attempt IS NOT NULL)) w ON w.series_id = s.id"
        " WHERE s.attempt IS NOT NULL AND s.attempt_step IS NOT NULL"
    )
    op.create_table(
        "replica_starts",
        sa.Column("experiment_id", sa.String(length=32), nullable=False),
        sa.Column("replica", sa.String(length=64), nullable=False),
        sa.Column("last", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["experiment_id"], ["experiments.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("experiment_id", "replica"),
    )


def downgrade() -> None:
    op.drop_table("replica_starts")
    op.drop_table("series_attempts")
    with op.batch_alter_table("texts", schema=None) as batch_op:
        batch_op.drop_column("attempt")
