"""The `store` fixture: every store test runs on SQLite and on a real PostgreSQL server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from phalanx.store.artifacts import ArtifactStore
from phalanx.store.sql import SqlStore
from tests.support import postgres


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SqlStore]:
    artifacts = ArtifactStore(str(tmp_path / "artifacts"))
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'phalanx.db'}"
    else:
        reason = postgres.unavailable_reason()
        if reason:
            pytest.skip(reason)
        url = postgres.shared_postgres().create_database()
    s = SqlStore(url, artifacts)
    yield s
    s.close()
