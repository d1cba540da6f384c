"""experiments.kind: what an experiment is (issue 27): "training" (everything before this revision,
and every `phalanx run` or Task.init) or "service" (one `phalanx serve` session, whose scalars are
its request rate, latency, errors and batch sizes). The list and the page show it.

Revision ID: 0014_service_experiment_kind_i27
Revises: 0013_scoping_model_project
Create Date: 2026-11-26 17:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014_service_experiment_kind_i27"
down_revision = "0013_scoping_model_project"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "experiments",
        sa.Column("kind", sa.String(length=16), server_default="training", nullable=False),
    )


def downgrade() -> None:
    with op.batch_alter_table("experiments") as batch:
        batch.drop_column("kind")
