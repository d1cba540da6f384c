"""Data belongs to a project (issue 36): datastores and dataset versions get the project that owns
them (NULL: recorded before, or by hand without one) and whether an admin shared them with every
project; a datastore may name the AWS profile it is read with. A server's boxed experiment reads
only its own project's and the shared ones, with its project's credentials, never the server's.

Revision ID: 0016_data_owner_i36
Revises: 0015_plane_submissions
Create Date: 2026-12-01 23:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016_data_owner_i36"
down_revision = "0015_plane_submissions"
branch_labels = None
depends_on = None


def upgrade() -> None:
    for table in ("datastores", "dataset_versions"):
        op.add_column(table, sa.Column("project", sa.String(length=64), nullable=True))
        op.add_column(table, sa.Column("shared", sa.Integer(), server_default="0", nullable=False))
    op.add_column("datastores", sa.Column("profile", sa.String(length=128), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("datastores") as batch:
        for column in ("profile", "shared", "project"):
            batch.drop_column(column)
    with op.batch_alter_table("dataset_versions") as batch:
        for column in ("shared", "project"):
            batch.drop_column(column)
