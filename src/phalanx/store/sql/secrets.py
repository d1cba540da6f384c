"""The project_secrets table: (project, name) -> ciphertext. The store never sees a value in clear:
``phalanx.store.secrets`` encrypts before ``put`` and decrypts after ``ciphertexts``."""

from __future__ import annotations

import time

from sqlalchemy import Engine, delete, insert, select

from phalanx.store.sql.engine import writer
from phalanx.store.sql.models import ProjectSecretRow


def put(engine: Engine, project: str, name: str, ciphertext: str) -> None:
    where = (ProjectSecretRow.c.project == project, ProjectSecretRow.c.name == name)
    with writer(engine).begin() as conn:
        conn.execute(delete(ProjectSecretRow).where(*where))
        conn.execute(
            insert(ProjectSecretRow).values(
                project=project, name=name, ciphertext=ciphertext, updated_at=time.time()
            )
        )


def names(engine: Engine, project: str | None) -> list[tuple[str, str, float]]:
    """(project, name, updated_at) of every secret (of one project), never the values."""
    query = select(
        ProjectSecretRow.c.project, ProjectSecretRow.c.name, ProjectSecretRow.c.updated_at
    ).order_by(ProjectSecretRow.c.project, ProjectSecretRow.c.name)
    if project is not None:
        query = query.where(ProjectSecretRow.c.project == project)
    with engine.connect() as conn:
        return [(str(p), str(n), float(t)) for p, n, t in conn.execute(query)]


def ciphertexts(engine: Engine, project: str) -> dict[str, str]:
    query = select(ProjectSecretRow.c.name, ProjectSecretRow.c.ciphertext).where(
        ProjectSecretRow.c.project == project
    )
    with engine.connect() as conn:
        return {str(n): str(c) for n, c in conn.execute(query)}


def remove(engine: Engine, project: str, name: str) -> bool:
    with writer(engine).begin() as conn:
        result = conn.execute(
            delete(ProjectSecretRow).where(
                ProjectSecretRow.c.project == project, ProjectSecretRow.c.name == name
            )
        )
        return bool(result.rowcount)
