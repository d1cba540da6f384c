"""which attempt last wrote each scalar series, and from which step (requeue/restart de-duplication)

Revision ID: 0004_requeue
Revises: 0003_resume
Create Date: 2026-11-23 20:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004_requeue"
down_revision = "0003_resume"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("series", schema=None) as batch_op:
        batch_op.add_column(sa.Column("attempt", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("attempt_step", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("series", schema=None) as batch_op:
        batch_op.drop_column("attempt_step")
        batch_op.drop_column("attempt")
