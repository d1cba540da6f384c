"""registered_models.project: a registered model belongs to a project (issue 25), the project of
the experiment it was first registered from; its readers are that project's viewers and its
writers its editors. Models registered before this revision get the project of their earliest
version's experiment, or the project its lineage recorded when that experiment was deleted since,
else 'default'.

Revision ID: 0013_scoping_model_project
Revises: 0012_quotas_project_quotas
Create Date: 2026-11-26 15:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013_scoping_model_project"
down_revision = "0012_quotas_project_quotas"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "registered_models",
        sa.Column("project", sa.String(length=255), server_default="default", nullable=False),
    )
    op.create_index(op.f("ix_registered_models_project"), "registered_models", ["project"])
    conn = op.get_bind()
    versions = sa.table(
        "model_versions",
        sa.column("name", sa.String),
        sa.column("version", sa.Integer),
        sa.column("experiment_id", sa.String),
        sa.column("lineage", sa.JSON),
    )
    experiments = sa.table("experiments", sa.column("id", sa.String), sa.column("project", sa.String))
    models = sa.table("registered_models", sa.column("name", sa.String), sa.column("project", sa.String))
    rows = conn.execute(
        sa.select(versions.c.name, versions.c.lineage, experiments.c.project)
        .select_from(versions.outerjoin(experiments, experiments.c.id == versions.c.experiment_id))
        .order_by(versions.c.name, versions.c.version)
    ).all()
    chosen: dict[str, str] = {}
    for name, lineage, project in rows:
        if name in chosen:
            continue  # the earliest version decides
        source = lineage.get("experiment") if isinstance(lineage, dict) else None
        recorded = source.get("project") if isinstance(source, dict) else None
        found = project or recorded
        if found and found != "default":
            chosen[name] = str(found)
    for name, project in chosen.items():
        conn.execute(sa.update(models).where(models.c.name == name).values(project=project))


def downgrade() -> None:
    op.drop_index(op.f("ix_registered_models_project"), table_name="registered_models")
    op.drop_column("registered_models", "project")  # SQLite 3.35+ drops a column in place
