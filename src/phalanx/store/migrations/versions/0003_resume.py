"""attempts of an experiment (start, restarts, `phalanx resume`) and what each experiment ran (repro)

Revision ID: 0003_resume
Revises: 0003_groups
Create Date: 2026-11-23 18:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003_resume"
down_revision = "0003_groups"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("experiments", schema=None) as batch_op:
        batch_op.add_column(sa.Column("repro", sa.JSON(), nullable=True))
    op.create_table(
        "attempts",
        sa.Column("experiment_id", sa.String(length=32), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("checkpoint_step", sa.BigInteger(), nullable=True),
        sa.Column("started_at", sa.Float(), nullable=False),
        sa.Column("finished_at", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(["experiment_id"], ["experiments.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("experiment_id", "number"),
    )


def downgrade() -> None:
    op.drop_table("attempts")
    with op.batch_alter_table("experiments", schema=None) as batch_op:
        batch_op.drop_column("repro")
