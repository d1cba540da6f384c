"""The PostgreSQL half of the store tests. tests/unit runs every store test on SQLite only (it
starts no process); each tests/integration/store/test_pg_<module>.py collects one unit module again
here, where the `store` fixture is a fresh database on the one PostgreSQL server of the session
(tests/support/postgres.py), and keeps only its PostgreSQL variants: a store test is written once
and runs on both databases."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support import postgres

from phalanx.store.artifacts import ArtifactStore
from phalanx.store.sql import SqlStore

HERE = Path(__file__).parent


@pytest.fixture(params=[pytest.param("postgresql", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SqlStore]:
    reason = postgres.unavailable_reason()
    if reason:
        pytest.skip(reason)
    s = SqlStore(postgres.shared_postgres().create_database(), ArtifactStore(str(tmp_path / "artifacts")))
    yield s
    s.close()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A re-collected unit module's SQLite variants and database-free tests already ran in tests/unit."""
    again = [
        i
        for i in items
        if i.path.parent == HERE
        and i.path.name.startswith("test_pg_")
        and not i.get_closest_marker("postgres")
    ]
    if again:
        config.hook.pytest_deselected(items=again)
        gone = set(again)
        items[:] = [i for i in items if i not in gone]
