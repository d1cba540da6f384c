"""alert_hooks: a project's webhooks and the experiment ends they are told about; alert_deliveries:
the outbox, one row per event and hook written with the end it reports, sent by the server;
alert_attempts: each try of a delivery (issue 43 item 5)

Revision ID: 0017_alert_hooks_i43
Revises: 0016_data_owner_i36
Create Date: 2026-12-02 14:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017_alert_hooks_i43"
down_revision = "0016_data_owner_i36"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "alert_hooks",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("project", sa.String(length=128), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("events", sa.String(length=128), nullable=False),
        sa.Column("secret", sa.String(length=256), nullable=False),
        sa.Column("created_by", sa.String(length=128), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_alert_hooks_project", "alert_hooks", ["project"])
    op.create_table(
        "alert_deliveries",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("hook_id", sa.String(length=32), nullable=False),
        sa.Column("experiment_id", sa.String(length=32), nullable=False),
        sa.Column("event", sa.String(length=32), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_at", sa.Float(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("finished_at", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_alert_deliveries_hook_id", "alert_deliveries", ["hook_id"])
    op.create_index("ix_alert_deliveries_due", "alert_deliveries", ["state", "next_at"])
    op.create_table(
        "alert_attempts",
        sa.Column("delivery_id", sa.String(length=36), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("delivery_id", "number"),
    )


def downgrade() -> None:
    op.drop_table("alert_attempts")
    op.drop_index("ix_alert_deliveries_due", table_name="alert_deliveries")
    op.drop_index("ix_alert_deliveries_hook_id", table_name="alert_deliveries")
    op.drop_table("alert_deliveries")
    op.drop_index("ix_alert_hooks_project", table_name="alert_hooks")
    op.drop_table("alert_hooks")
