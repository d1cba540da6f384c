"""registered_models.last_version: the highest version number a registered model ever had, kept
when versions are removed (`phalanx models rm NAME@N`), so that the next registration never gives
a removed version's number to another file (a pinned ``NAME@3`` never silently names a new model).
Existing models get their highest version's number.

Revision ID: 0020_registry_last_version
Revises: 0019_alert_model_alias_i43
Create Date: 2026-12-05 10:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020_registry_last_version"
down_revision = "0019_alert_model_alias_i43"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("registered_models", sa.Column("last_version", sa.Integer(), nullable=True))
    versions = sa.table("model_versions", sa.column("name", sa.String), sa.column("version", sa.Integer))
    models = sa.table(
        "registered_models", sa.column("name", sa.String), sa.column("last_version", sa.Integer)
    )
    highest = (
        sa.select(sa.func.max(versions.c.version)).where(versions.c.name == models.c.name).scalar_subquery()
    )
    op.execute(sa.update(models).values(last_version=highest))


def downgrade() -> None:
    # in place (SQLite 3.35+): a batch copy of the table would cascade-delete every version's row
    op.drop_column("registered_models", "last_version")
