"""experiment groups: groups and group_trials tables, experiments.group_id

Revision ID: 0003_groups
Revises: 0003_server
Create Date: 2026-11-23 17:50:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003_groups"
down_revision = "0003_server"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "groups",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("project", sa.String(length=255), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("search", sa.String(length=16), nullable=False),
        sa.Column("planned", sa.Integer(), nullable=False),
        sa.Column("concurrency", sa.Integer(), nullable=False),
        sa.Column("metric", sa.String(length=255), nullable=True),
        sa.Column("optimization", sa.String(length=16), nullable=True),
        sa.Column("spec_text", sa.Text(), nullable=False),
        sa.Column("source_file", sa.Text(), nullable=True),
        sa.Column("workdir", sa.Text(), nullable=True),
        sa.Column("options", sa.JSON(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("controller_pid", sa.Integer(), nullable=True),
        sa.Column("controller_host", sa.String(length=255), nullable=True),
        sa.Column("stop_requested", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("finished_at", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(op.f("ix_groups_project"), "groups", ["project"], unique=False)
    op.create_index(op.f("ix_groups_status"), "groups", ["status"], unique=False)
    op.create_index(op.f("ix_groups_created_at"), "groups", ["created_at"], unique=False)
    op.create_table(
        "group_trials",
        sa.Column("group_id", sa.String(length=32), nullable=False),
        sa.Column("number", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("experiment_id", sa.String(length=32), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("internal", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        sa.Column("step", sa.BigInteger(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("finished_at", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(["group_id"], ["groups.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("group_id", "number"),
        sa.UniqueConstraint("experiment_id", name="uq_group_trials_experiment"),
    )
    with op.batch_alter_table("experiments", schema=None) as batch_op:
        batch_op.add_column(sa.Column("group_id", sa.String(length=32), nullable=True))
        batch_op.create_index(batch_op.f("ix_experiments_group_id"), ["group_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("experiments", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_experiments_group_id"))
        batch_op.drop_column("group_id")
    op.drop_table("group_trials")
    op.drop_index(op.f("ix_groups_created_at"), table_name="groups")
    op.drop_index(op.f("ix_groups_status"), table_name="groups")
    op.drop_index(op.f("ix_groups_project"), table_name="groups")
    op.drop_table("groups")
