"""alert_deliveries.group_id: a delivery is about an experiment's end (experiment_id, as before) or
a group's (group_id; the event group.finished), so experiment_id may now be NULL (issue 43 item 5).
Every delivery written before this revision keeps its experiment. A downgrade drops the group
deliveries (and their attempts): the schema before it cannot hold them.

Revision ID: 0018_alert_group_finished_i43
Revises: 0017_alert_hooks_i43
Create Date: 2026-12-03 10:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018_alert_group_finished_i43"
down_revision = "0017_alert_hooks_i43"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # batch: SQLite changes a column's NULL-ability only by copying the table (PostgreSQL alters it)
    with op.batch_alter_table("alert_deliveries") as batch:
        batch.alter_column("experiment_id", existing_type=sa.String(length=32), nullable=True)
        batch.add_column(sa.Column("group_id", sa.String(length=32), nullable=True))


def downgrade() -> None:
    deliveries = sa.table(
        "alert_deliveries", sa.column("id", sa.String), sa.column("experiment_id", sa.String)
    )
    attempts = sa.table("alert_attempts", sa.column("delivery_id", sa.String))
    about_groups = sa.select(deliveries.c.id).where(deliveries.c.experiment_id.is_(None))
    op.execute(sa.delete(attempts).where(attempts.c.delivery_id.in_(about_groups)))
    op.execute(sa.delete(deliveries).where(deliveries.c.experiment_id.is_(None)))
    with op.batch_alter_table("alert_deliveries") as batch:
        batch.drop_column("group_id")
        batch.alter_column("experiment_id", existing_type=sa.String(length=32), nullable=False)
