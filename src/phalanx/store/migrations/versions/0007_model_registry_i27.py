"""the model registry: registered_models, model_versions, model_aliases (phalanx.registry)

Revision ID: 0007_model_registry_i27
Revises: 0006_event_key_experiment
Create Date: 2026-11-26 10:50:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007_model_registry_i27"
down_revision = "0006_event_key_experiment"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "registered_models",
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("tags", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_table(
        "model_versions",
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("version", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("experiment_id", sa.String(length=32), nullable=False),
        sa.Column("source", sa.String(length=255), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("signature", sa.JSON(), nullable=False),
        sa.Column("lineage", sa.JSON(), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("tags", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["name"], ["registered_models.name"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("name", "version"),
    )
    op.create_index(op.f("ix_model_versions_experiment_id"), "model_versions", ["experiment_id"])
    op.create_table(
        "model_aliases",
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("alias", sa.String(length=64), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["name"], ["registered_models.name"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("name", "alias"),
    )


def downgrade() -> None:
    op.drop_table("model_aliases")
    op.drop_index(op.f("ix_model_versions_experiment_id"), table_name="model_versions")
    op.drop_table("model_versions")
    op.drop_table("registered_models")
