"""The project_placements table: (project, cluster) -> Slurm account/partition, Kubernetes namespace."""

from __future__ import annotations

import time

from sqlalchemy import Engine, delete, insert, select

from phalanx.store.sql.engine import writer
from phalanx.store.sql.models import ProjectPlacementRow

Placement = tuple[str, str, str | None, str | None, str | None]  # project, cluster, account, partition, ns

_COLUMNS = (
    ProjectPlacementRow.c.project,
    ProjectPlacementRow.c.cluster,
    ProjectPlacementRow.c.account,
    ProjectPlacementRow.c.partition,
    ProjectPlacementRow.c.namespace,
)


def put(engine: Engine, placement: Placement) -> None:
    project, cluster, account, partition, namespace = placement
    where = (ProjectPlacementRow.c.project == project, ProjectPlacementRow.c.cluster == cluster)
    with writer(engine).begin() as conn:
        conn.execute(delete(ProjectPlacementRow).where(*where))
        conn.execute(
            insert(ProjectPlacementRow).values(
                project=project,
                cluster=cluster,
                account=account,
                partition=partition,
                namespace=namespace,
                updated_at=time.time(),
            )
        )


def list_placements(
    engine: Engine, project: str | None = None, cluster: str | None = None
) -> list[Placement]:
    query = select(*_COLUMNS).order_by(ProjectPlacementRow.c.cluster, ProjectPlacementRow.c.project)
    if project is not None:
        query = query.where(ProjectPlacementRow.c.project == project)
    if cluster is not None:
        query = query.where(ProjectPlacementRow.c.cluster == cluster)
    with engine.connect() as conn:
        return [(str(p), str(c), a, pa, n) for p, c, a, pa, n in conn.execute(query)]


def remove(engine: Engine, project: str, cluster: str) -> bool:
    with writer(engine).begin() as conn:
        result = conn.execute(
            delete(ProjectPlacementRow).where(
                ProjectPlacementRow.c.project == project, ProjectPlacementRow.c.cluster == cluster
            )
        )
        return bool(result.rowcount)
