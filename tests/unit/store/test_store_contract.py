"""The store's contract: callers need only the protocols of ``store.base``, and storage failures
reach them as Phalanx errors (never SQLAlchemy's or a driver's), on SQLite and on PostgreSQL."""

from __future__ import annotations

import ast
import inspect
import shutil
from pathlib import Path

import pytest

import phalanx
from phalanx.domain import Event, EventKind
from phalanx.errors import BackendUnavailable, UsageError
from phalanx.store.artifacts import ArtifactStore
from phalanx.store.base import GroupStore, IngestStore, Store
from phalanx.store.sql import SqlStore
from phalanx.store.submissions import SubmissionStore

SRC = Path(phalanx.__file__).resolve().parent
# SqlStore's own extras, for tests and diagnostics: no caller in the product uses them.
DIAGNOSTICS = {"event_count", "dialect"}
PROTOCOLS = (Store, IngestStore, GroupStore, SubmissionStore)
# SqlStore's insides: a caller reaching for them (gc once VACUUMed through store.engine) bypasses the
# protocols and the error translation.
SQL_INSIDES = {"engine", "_writer", "raw_connection", "driver_connection"}


def _methods(proto: type) -> dict[str, object]:
    return {n: m for n, m in vars(proto).items() if callable(m) and not n.startswith("_")}


def test_every_public_method_of_the_sql_store_is_on_a_protocol() -> None:
    public = {n for n, _ in inspect.getmembers(SqlStore) if not n.startswith("_")} - {"engine"}
    attributes = {"artifact_store", "server_url"}  # annotated on Store, so not in dir(Store)
    on_protocols = {n for p in PROTOCOLS for n in dir(p) if not n.startswith("_")} | attributes
    assert public - DIAGNOSTICS <= on_protocols, "document the new method on store.base.Store first"


def test_every_protocol_method_says_what_it_raises_or_returns() -> None:
    for proto in PROTOCOLS:
        for name, member in _methods(proto).items():
            doc = inspect.getdoc(member) or ""
            assert doc, f"{proto.__name__}.{name} has no docstring"
    for name, member in _methods(GroupStore).items():  # the newer protocol says both, every time
        doc = inspect.getdoc(member) or ""
        assert "Return" in doc or "returns" in doc, f"GroupStore.{name}: say what it returns"
        assert "Raise" in doc, f"GroupStore.{name}: say what it raises (or that it raises nothing of its own)"


def test_the_sql_store_implements_each_protocol_with_the_same_parameters() -> None:
    """Names, kinds and defaults as documented: a caller typed with the protocol calls SqlStore."""
    for proto in PROTOCOLS:
        for name, member in _methods(proto).items():
            documented = inspect.signature(member).parameters  # type: ignore[arg-type]
            actual = inspect.signature(getattr(SqlStore, name)).parameters
            shape = [(p.name, p.kind, p.default) for p in documented.values()]
            assert [(p.name, p.kind, p.default) for p in actual.values()] == shape, f"SqlStore.{name}"


def _names_the_sql_store(path: Path) -> list[str]:
    """Where a module imports ``phalanx.store.sql`` (or anything from it), names ``SqlStore`` or
    reaches into a SQL store (``SQL_INSIDES``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module.startswith("phalanx.store.sql") or (
                node.module == "phalanx.store" and any(a.name == "sql" for a in node.names)
            ):
                found.append(f"line {node.lineno}: from {node.module} import ...")
        elif isinstance(node, ast.Import):
            found += [
                f"line {node.lineno}: import {a.name}"
                for a in node.names
                if a.name.startswith("phalanx.store.sql")
            ]
        elif (isinstance(node, ast.Name) and node.id == "SqlStore") or (
            isinstance(node, ast.Attribute) and node.attr == "SqlStore"
        ):
            found.append(f"line {node.lineno}: SqlStore")
        elif isinstance(node, ast.Attribute) and node.attr in SQL_INSIDES:
            found.append(f"line {node.lineno}: .{node.attr}")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
            and len(node.args) > 1
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value in SQL_INSIDES
        ):
            found.append(f"line {node.lineno}: {node.func.id}(..., {node.args[1].value!r})")
    return found


def test_only_the_store_package_knows_the_sql_store() -> None:
    """Callers depend on the protocols of ``store.base`` alone (``open_store`` builds the store):
    a module outside ``phalanx.store`` that imports ``phalanx.store.sql``, names ``SqlStore`` (a
    type hint included) or uses its engine fails here. Put what it needs on a protocol instead."""
    users = {
        str(p.relative_to(SRC)): found
        for p in SRC.rglob("*.py")
        if p.relative_to(SRC).parts[0] != "store" and (found := _names_the_sql_store(p))
    }
    assert users == {}


def test_only_the_store_package_knows_sqlalchemy() -> None:
    users = {
        str(p.relative_to(SRC))
        for p in SRC.rglob("*.py")
        if "store" not in p.relative_to(SRC).parts[:1]
        and ("from sqlalchemy" in p.read_text() or "import sqlalchemy" in p.read_text())
    }
    assert users == set()


def test_compact_gives_back_what_a_delete_freed(store: SqlStore, tmp_path: Path) -> None:
    """`phalanx gc` compacts through the protocol (it used to VACUUM through ``store.engine``)."""
    e = store.create_experiment(name="n", project="p")
    lines = [f"line {i} " + "x" * 200 for i in range(5000)]
    store.write_events([Event(e.id, EventKind.LOG, {"lines": lines}, "master", stream="s", seq=0, time=1.0)])
    store.delete_experiment(e.id)
    db = tmp_path / "phalanx.db"
    before = _size(db)
    store.compact()
    store.compact()  # twice: nothing left to give back is no error
    if store.dialect == "sqlite":
        assert _size(db) < before / 2
    assert store.list_experiments().total == 0


def _size(db: Path) -> int:
    wal = db.with_name(db.name + "-wal")
    return (db.stat().st_size if db.exists() else 0) + (wal.stat().st_size if wal.exists() else 0)


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


def test_group_methods_also_raise_phalanx_errors(tmp_path: Path) -> None:
    folder = tmp_path / "db"
    folder.mkdir()
    store = SqlStore(f"sqlite:///{folder / 'phalanx.db'}", ArtifactStore(str(tmp_path / "a")))
    store.close()
    shutil.rmtree(folder)
    try:
        with pytest.raises(BackendUnavailable):
            store.list_groups()
    finally:
        store.close()
