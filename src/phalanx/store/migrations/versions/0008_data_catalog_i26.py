"""datastores and dataset versions (phalanx.data): the data an experiment reads, by name

Revision ID: 0008_data_catalog_i26
Revises: 0007_model_registry_i27
Create Date: 2026-11-26 10:50:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008_data_catalog_i26"
down_revision = "0007_model_registry_i27"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "datastores",
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_table(
        "dataset_versions",
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("version", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("copied", sa.Integer(), nullable=False),
        sa.Column("files", sa.JSON(), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("file_count", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("name", "version"),
    )
    op.create_index(op.f("ix_dataset_versions_digest"), "dataset_versions", ["digest"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_dataset_versions_digest"), table_name="dataset_versions")
    op.drop_table("dataset_versions")
    op.drop_table("datastores")
