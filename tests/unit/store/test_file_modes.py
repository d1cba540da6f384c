"""A SQLite store's files are their owner's alone (mode 0600): the database holds every project's
records, the secrets' ciphertexts and the users' token hashes (docs/security.md)."""

from __future__ import annotations

import os
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from phalanx.config import Settings
from phalanx.domain import Replica, Role
from phalanx.store import open_store, private_file
from phalanx.store.base import LocalStore
from phalanx.store.lite import LiteReader
from phalanx.store.migrations import HEAD
from phalanx.store.sql import engine


@pytest.fixture(autouse=True)
def _usual_umask() -> Iterator[None]:
    """The umask most accounts have (0o022: files 0644), whatever this process's is."""
    was = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(was)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _files(home: Path) -> dict[str, int]:
    """The modes of the database and SQLite's files beside it, by name."""
    return {p.name: _mode(p) for p in sorted(home.glob("phalanx.db*")) if not p.name.endswith(".lock")}


def _write(store: LocalStore, name: str) -> str:
    replicas = [Replica("", "master", Role.MASTER, 0, 0)]
    return store.create_experiment(name=name, project="p", replicas=replicas, topology={"master": 1}).id


def test_a_new_store_its_wal_and_its_shm_are_the_owners_alone(tmp_path: Path) -> None:
    home = tmp_path / "home"
    store = open_store(Settings(home=home, db_url=None, artifacts_url=None))
    try:
        _write(store, "first")
        with store.engine.connect():  # a connection open: the -wal and -shm are there
            assert _files(home) == {"phalanx.db": 0o600, "phalanx.db-shm": 0o600, "phalanx.db-wal": 0o600}
    finally:
        store.close()


def test_a_database_an_older_version_made_0644_is_tightened_when_the_store_opens_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    settings = Settings(home=home, db_url=None, artifacts_url=None)
    store = open_store(settings)
    made = _write(store, "before")
    store.close()
    database = home / "phalanx.db"
    database.chmod(0o644)  # as every version before this one left it
    older = sqlite3.connect(database)  # a process of the older version, writing: its -wal and -shm 0644
    try:
        older.execute("UPDATE experiments SET name = 'renamed'")
        older.commit()
        assert _files(home) == {"phalanx.db": 0o644, "phalanx.db-shm": 0o644, "phalanx.db-wal": 0o644}
        store = open_store(settings)
        try:
            assert _files(home) == {"phalanx.db": 0o600, "phalanx.db-shm": 0o600, "phalanx.db-wal": 0o600}
            assert store.get_experiment(made).name == "renamed"
        finally:
            store.close()
    finally:
        older.close()


def test_a_database_of_another_account_is_left_as_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    database = tmp_path / "phalanx.db"
    database.touch()
    database.chmod(0o644)
    monkeypatch.setattr(os, "geteuid", lambda: database.stat().st_uid + 1)
    private_file.tighten(database)
    assert _mode(database) == 0o644


def test_the_lean_reader_tightens_an_older_store_too(tmp_path: Path) -> None:
    """`phalanx ls` and `phalanx logs` alone (no SQLAlchemy) leave no world-readable store behind."""
    home = tmp_path / "home"
    store = open_store(Settings(home=home, db_url=None, artifacts_url=None))
    _write(store, "before")
    store.close()
    (home / "phalanx.db").chmod(0o644)
    reader = LiteReader.open(f"sqlite:///{home / 'phalanx.db'}", HEAD)
    assert reader is not None
    reader.close()
    assert _mode(home / "phalanx.db") == 0o600


def test_a_symbolic_link_in_the_stores_place_is_never_followed(tmp_path: Path) -> None:
    victim = tmp_path / "elsewhere"
    victim.write_text("not a store")
    victim.chmod(0o644)
    database = tmp_path / "phalanx.db"
    database.symlink_to(victim)
    private_file.create_private(database)
    private_file.tighten(database)
    assert _mode(victim) == 0o644 and victim.read_text() == "not a store"


def test_a_mode_that_cannot_be_changed_never_stops_the_store_from_opening(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    settings = Settings(home=home, db_url=None, artifacts_url=None)
    store = open_store(settings)
    made = _write(store, "kept")
    store.close()
    (home / "phalanx.db").chmod(0o644)

    def refused(*_args: object, **_kwargs: object) -> None:
        raise PermissionError("not permitted")

    monkeypatch.setattr(os, "chmod", refused)
    store = open_store(settings)
    try:
        assert store.get_experiment(made).name == "kept"
        assert _mode(home / "phalanx.db") == 0o644
    finally:
        store.close()


def test_an_in_memory_database_needs_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    engine.make_engine("sqlite:///:memory:").dispose()
    assert not list(tmp_path.iterdir())


def test_tightening_never_opens_a_descriptor_of_the_stores_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Closing any descriptor of a SQLite file drops every POSIX lock this process holds on it, its
    open connections' too: a store opened twice in one process (the supervisor's lean read of its
    secrets, then its store) was corrupted ("database disk image is malformed") when the second
    open tightened the file through a descriptor of its own."""
    home = tmp_path / "home"
    store = open_store(Settings(home=home, db_url=None, artifacts_url=None))
    _write(store, "open")
    for path in home.glob("phalanx.db*"):
        path.chmod(0o644)
    opened: list[str] = []
    real_open = os.open

    def watched(path: object, *args: object, **kwargs: object) -> int:
        opened.append(str(path))
        return real_open(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", watched)
    private_file.tighten(home / "phalanx.db")
    store.close()
    assert not [p for p in opened if "phalanx.db" in p], opened
    assert _files(home)["phalanx.db"] == 0o600
