"""Real parts for the supervisor's collaborators: a SQLite store and a home in the test's folder."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from phalanx.config import Settings
from phalanx.store.artifacts import ArtifactStore
from phalanx.store.sql import SqlStore
from tests.unit.supervisor.fakes import FakeObserver


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(home=str(tmp_path / "home"))


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqlStore]:
    s = SqlStore(f"sqlite:///{tmp_path / 'phalanx.db'}", ArtifactStore(str(tmp_path / "artifacts")))
    yield s
    s.close()


@pytest.fixture
def observer() -> FakeObserver:
    return FakeObserver()
