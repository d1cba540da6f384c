"""The project_quotas table: per project and target, what it may hold at once and how many may wait.

Set replaces the row in one transaction (delete then insert, so SQLite and PostgreSQL behave alike
without a dialect-specific upsert); a NULL column is no limit.
"""

from __future__ import annotations

import time

from sqlalchemy import Engine, delete, insert, select

from phalanx.share import Quota, quota_of
from phalanx.store.sql.engine import writer
from phalanx.store.sql.models import ProjectQuotaRow

_COLUMNS = (
    ProjectQuotaRow.c.project,
    ProjectQuotaRow.c.target,
    ProjectQuotaRow.c.cores,
    ProjectQuotaRow.c.gpus,
    ProjectQuotaRow.c.memory_mib,
    ProjectQuotaRow.c.max_waiting,
)


def put(engine: Engine, quota: Quota) -> None:
    where = (ProjectQuotaRow.c.project == quota.project, ProjectQuotaRow.c.target == quota.target)
    with writer(engine).begin() as conn:
        conn.execute(delete(ProjectQuotaRow).where(*where))
        conn.execute(
            insert(ProjectQuotaRow).values(
                project=quota.project,
                target=quota.target,
                cores=quota.limit.cores,
                gpus=quota.limit.gpus,
                memory_mib=quota.limit.memory_mib,
                max_waiting=quota.limit.max_waiting,
                updated_at=time.time(),
            )
        )


def get(engine: Engine, project: str, target: str) -> Quota | None:
    with engine.connect() as conn:
        row = conn.execute(
            select(*_COLUMNS).where(ProjectQuotaRow.c.project == project, ProjectQuotaRow.c.target == target)
        ).one_or_none()
        return None if row is None else quota_of(row)


def list_quotas(engine: Engine, target: str | None = None) -> list[Quota]:
    query = select(*_COLUMNS).order_by(ProjectQuotaRow.c.target, ProjectQuotaRow.c.project)
    if target is not None:
        query = query.where(ProjectQuotaRow.c.target == target)
    with engine.connect() as conn:
        return [quota_of(row) for row in conn.execute(query)]


def remove(engine: Engine, project: str, target: str) -> bool:
    with writer(engine).begin() as conn:
        result = conn.execute(
            delete(ProjectQuotaRow).where(
                ProjectQuotaRow.c.project == project, ProjectQuotaRow.c.target == target
            )
        )
        return bool(result.rowcount)
