"""The project_placements table: (project, cluster) -> Slurm account/partition, Kubernetes namespace."""

from __future__ import annotations

import time

from sqlalchemy import Engine, delete, insert, select

from phalanx.store.sql.engine import writer
from phalanx.store.sql.models import ProjectPlacementRow

Placement = tuple[str, str, str | None, str | None, str | None]  # project, cluster, account, partition, ns

_COLUMNS = (
    ProjectPlacementRow.project,
    ProjectPlacementRow.cluster,
    ProjectPlacementRow.account,
    ProjectPlacementRow.partition,
    ProjectPlacementRow.namespace,
)


def put(engine: Engine, placement: Placement) -> None:
    project, cluster, account, partition, namespace = placement
    where = (ProjectPlacementRow.project == project, ProjectPlacementRow.cluster == cluster)
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
    query = select(*_COLUMNS).order_by(ProjectPlacementRow.cluster, ProjectPlacementRow.project)
    if project is not None:
        query = query.where(ProjectPlacementRow.project == project)
    if cluster is not None:
        query = query.where(ProjectPlacementRow.cluster == cluster)
    with engine.connect() as conn:
        return [(str(p), str(c), a, pa, n) for p, c, a, pa, n in conn.execute(query)]


def remove(engine: Engine, project: str, cluster: str) -> bool:
    with writer(engine).begin() as conn:
        result = conn.execute(
            delete(ProjectPlacementRow).where(
                ProjectPlacementRow.project == project, ProjectPlacementRow.cluster == cluster
            )
        )
        return bool(result.rowcount)
