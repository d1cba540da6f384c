"""An app over a real SQLite store in a temp PHALANX_HOME, and an HTTP client for it (in process)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from phalanx.config import Settings
from phalanx.server.app import create_app
from phalanx.server.settings import ServerSettings
from phalanx.store import open_store
from phalanx.store.base import Store
from tests.unit.server.fake_services import fake_boards, started_without_a_process
from tests.unit.server.model_checks import checking_models_in_process

__all__ = ["fake_boards", "started_without_a_process"]  # fixtures: services without a process


@pytest.fixture
def settings(phalanx_home: Path) -> ServerSettings:
    # no launcher: tests/unit starts no process (what a submit writes is checked; starting it is
    # tests/integration's, against a real `phalanx server`)
    return ServerSettings(
        store=Settings(home=phalanx_home), poll_seconds=0.05, allowed_hosts=["testserver"], launch_workers=0
    )


@pytest.fixture
def store(settings: ServerSettings) -> Iterator[Store]:
    s = open_store(settings.store)
    yield s
    s.close()


@pytest.fixture
def client(settings: ServerSettings, store: Store) -> Iterator[TestClient]:
    # registering a model checks it in this process (the test seam: tests/unit starts none)
    with TestClient(checking_models_in_process(create_app(settings, store))) as c:
        yield c
