"""submissions: experiments submitted to the server (code bundle hash, idempotency key)

Revision ID: 0009_srvsubmit_submissions
Revises: 0008_data_catalog_i26
Create Date: 2026-11-26 11:50:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009_srvsubmit_submissions"
down_revision = "0008_data_catalog_i26"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "submissions",
        sa.Column("experiment_id", sa.String(length=32), nullable=False),
        sa.Column("idempotency_key", sa.String(length=200), nullable=True),
        sa.Column("bundle_sha256", sa.String(length=64), nullable=False),
        sa.Column("submitted_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("experiment_id"),
        sa.UniqueConstraint("idempotency_key"),
    )


def downgrade() -> None:
    op.drop_table("submissions")
