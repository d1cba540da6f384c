"""params.value declared TEXT on SQLite (still JSON): a column declared JSON has numeric affinity
there, so a parameter whose value's text looked like a number was stored as one (``1.0`` read back
as 1, ``3e5`` as 300000, an integer past 2**63 rounded). The table is copied into one whose value
column is TEXT; a value stored as a number before keeps the number it became, exactly (the copy's
CAST would write a real with 15 digits: 0.30000000000000004 as 0.3, so reals are written again as
JSON, the shortest text that reads back as the same number). PostgreSQL's json column keeps the
text as given: nothing to do there.

Revision ID: 0021_params_value_text_on_sqlite
Revises: 0020_registry_last_version
Create Date: 2026-12-05 15:20:00
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

revision = "0021_params_value_text_on_sqlite"
down_revision = "0020_registry_last_version"
branch_labels = None
depends_on = None


def upgrade() -> None:
    from phalanx.store.sql.models import JsonText  # why: Alembic loads every revision file

    bind = op.get_bind()
    if bind.dialect.name != "sqlite":
        return
    reals = bind.execute(sa.text("SELECT id, value FROM params WHERE typeof(value) = 'real'")).all()
    with op.batch_alter_table("params", recreate="always") as batch:
        batch.alter_column("value", type_=JsonText(), existing_type=sa.JSON(), existing_nullable=False)
    if reals:
        bind.execute(
            sa.text("UPDATE params SET value = :value WHERE id = :id"),
            [{"id": row_id, "value": json.dumps(value)} for row_id, value in reals],
        )


def downgrade() -> None:
    from phalanx.store.sql.models import JsonText  # why: Alembic loads every revision file

    if op.get_bind().dialect.name != "sqlite":
        return
    with op.batch_alter_table("params", recreate="always") as batch:
        batch.alter_column("value", type_=sa.JSON(), existing_type=JsonText(), existing_nullable=False)
