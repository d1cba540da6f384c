"""alert_deliveries.model: a delivery may be about a model alias that moved (the event model.alias;
the registered model's name), beside an experiment's end (experiment_id) and a group's
(group_id): exactly one of the three is set (issue 43 item 5). A downgrade drops the model
deliveries (and their attempts): the schema before it cannot hold them.

Revision ID: 0019_alert_model_alias_i43
Revises: 0018_alert_group_finished_i43
Create Date: 2026-12-03 18:15:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019_alert_model_alias_i43"
down_revision = "0018_alert_group_finished_i43"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("alert_deliveries") as batch:
        batch.add_column(sa.Column("model", sa.String(length=100), nullable=True))


def downgrade() -> None:
    deliveries = sa.table("alert_deliveries", sa.column("id", sa.String), sa.column("model", sa.String))
    attempts = sa.table("alert_attempts", sa.column("delivery_id", sa.String))
    about_models = sa.select(deliveries.c.id).where(deliveries.c.model.is_not(None))
    op.execute(sa.delete(attempts).where(attempts.c.delivery_id.in_(about_models)))
    op.execute(sa.delete(deliveries).where(deliveries.c.model.is_not(None)))
    with op.batch_alter_table("alert_deliveries") as batch:
        batch.drop_column("model")
