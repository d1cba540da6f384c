"""The store's contract: callers need only the protocols of ``store.base``, and storage failures
reach them as Phalanx errors (never SQLAlchemy's or a driver's), on SQLite and on PostgreSQL."""

from __future__ import annotations

import inspect
import shutil
from pathlib import Path

import pytest

import phalanx
from phalanx.domain import Event, EventKind
from phalanx.errors import BackendUnavailable, UsageError
from phalanx.store.artifacts import ArtifactStore
from phalanx.store.base import IngestStore, Store
from phalanx.store.sql import SqlStore

SRC = Path(phalanx.__file__).resolve().parent
# SqlStore's own extras, for tests and diagnostics: no caller in the product uses them.
DIAGNOSTICS = {"event_count", "dialect"}


def test_every_public_method_of_the_sql_store_is_on_a_protocol() -> None:
    public = {n for n, _ in inspect.getmembers(SqlStore) if not n.startswith("_")} - {"engine"}
    on_protocols = {n for n in dir(IngestStore) if not n.startswith("_")} | {"artifact_store"}
    assert public - DIAGNOSTICS <= on_protocols, "document the new method on store.base.Store first"


def test_every_protocol_method_says_what_it_raises_or_returns() -> None:
    for proto in (Store, IngestStore):
        for name, member in vars(proto).items():
            if callable(member) and not name.startswith("_"):
                doc = inspect.getdoc(member) or ""
                assert doc, f"{proto.__name__}.{name} has no docstring"


def test_only_the_store_package_knows_sqlalchemy() -> None:
    users = {
        str(p.relative_to(SRC))
        for p in SRC.rglob("*.py")
        if "store" not in p.relative_to(SRC).parts[:1]
        and ("from sqlalchemy" in p.read_text() or "import sqlalchemy" in p.read_text())
    }
    assert users == set()


def _scalar(experiment_id: str, iteration: int) -> Event:
    data = {"title": "loss", "series": "w", "value": 1.0, "iteration": iteration}
    return Event(experiment_id, EventKind.SCALAR, data, stream="s", seq=iteration % 1000, time=1.0)


def test_an_integer_beyond_64_bits_is_a_usage_error_and_nothing_is_written(store: SqlStore) -> None:
    e = store.create_experiment(name="n", project="p")
    with pytest.raises(UsageError, match="out of range"):
        store.write_events([_scalar(e.id, 1), _scalar(e.id, 10**23)])
    assert store.metric_titles(e.id) == {}
    assert store.write_events([_scalar(e.id, 1)]) == 1


def test_a_database_that_went_away_is_backend_unavailable(tmp_path: Path) -> None:
    folder = tmp_path / "db"
    folder.mkdir()
    store = SqlStore(f"sqlite:///{folder / 'phalanx.db'}", ArtifactStore(str(tmp_path / "a")))
    e = store.create_experiment(name="n", project="p")
    store.close()
    shutil.rmtree(folder)
    try:
        with pytest.raises(BackendUnavailable, match="the database failed"):
            store.get_experiment(e.id)
        with pytest.raises(BackendUnavailable):
            store.write_events([_scalar(e.id, 1)])
    finally:
        store.close()


def test_group_records_also_raise_phalanx_errors(tmp_path: Path) -> None:
    from phalanx.groups import records

    folder = tmp_path / "db"
    folder.mkdir()
    store = SqlStore(f"sqlite:///{folder / 'phalanx.db'}", ArtifactStore(str(tmp_path / "a")))
    store.close()
    shutil.rmtree(folder)
    try:
        with pytest.raises(BackendUnavailable):
            records.list_groups(store)
    finally:
        store.close()
