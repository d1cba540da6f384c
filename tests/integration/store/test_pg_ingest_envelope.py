"""tests/unit/server/test_ingest_envelope.py on PostgreSQL (SQLite: tests/unit; see conftest.py)."""

from tests.unit.server.test_ingest_envelope import *  # noqa: F403
