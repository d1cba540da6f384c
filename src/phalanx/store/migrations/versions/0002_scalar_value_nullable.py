"""scalar values may be NULL: SQLite stores a NaN (a diverged loss) as NULL

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22 17:15:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("scalars", schema=None) as batch_op:
        batch_op.alter_column("value", existing_type=sa.Float(), nullable=True)


def downgrade() -> None:
    op.execute("DELETE FROM scalars WHERE value IS NULL")
    with op.batch_alter_table("scalars", schema=None) as batch_op:
        batch_op.alter_column("value", existing_type=sa.Float(), nullable=False)
