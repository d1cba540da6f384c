"""project_quotas: per project and compute target, the cores, GPUs and memory it may hold at once
and how many of its experiments may wait (issue 25 item 4); project_secrets: encrypted credentials
a project's experiments get as environment variables, and project_placements: a project's Slurm
account/partition and Kubernetes namespace on a registered cluster (item 5)

Revision ID: 0012_quotas_project_quotas
Revises: 0011_leanstore_scalar_chunks
Create Date: 2026-11-26 13:50:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012_quotas_project_quotas"
down_revision = "0011_leanstore_scalar_chunks"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "project_quotas",
        sa.Column("project", sa.String(length=128), nullable=False),
        sa.Column("target", sa.String(length=100), nullable=False),
        sa.Column("cores", sa.Integer(), nullable=True),
        sa.Column("gpus", sa.Integer(), nullable=True),
        sa.Column("memory_mib", sa.Float(), nullable=True),
        sa.Column("max_waiting", sa.Integer(), nullable=True),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("project", "target"),
    )

    op.create_table(
        "project_secrets",
        sa.Column("project", sa.String(length=128), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("ciphertext", sa.Text(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("project", "name"),
    )
    op.create_table(
        "project_placements",
        sa.Column("project", sa.String(length=128), nullable=False),
        sa.Column("cluster", sa.String(length=63), nullable=False),
        sa.Column("account", sa.String(length=200), nullable=True),
        sa.Column("partition", sa.String(length=200), nullable=True),
        sa.Column("namespace", sa.String(length=63), nullable=True),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("project", "cluster"),
    )


def downgrade() -> None:
    op.drop_table("project_placements")
    op.drop_table("project_secrets")
    op.drop_table("project_quotas")
