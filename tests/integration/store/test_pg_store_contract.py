"""tests/unit/store/test_store_contract.py on PostgreSQL (SQLite: tests/unit; see conftest.py)."""

from tests.unit.store.test_store_contract import *  # noqa: F403
