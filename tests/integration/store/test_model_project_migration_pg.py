"""Migration 0013_scoping_model_project on PostgreSQL: existing registered models get the project of
the experiment they were first registered from, as on SQLite (tests/unit/store)."""

from __future__ import annotations

import pytest
from tests.support import postgres
from tests.unit.store.test_model_project_migration import check_existing_models_get_their_projects

pytestmark = pytest.mark.postgres


def test_existing_models_get_their_source_experiments_project_on_postgresql() -> None:
    reason = postgres.unavailable_reason()
    if reason:
        pytest.skip(reason)
    check_existing_models_get_their_projects(postgres.shared_postgres().create_database())
