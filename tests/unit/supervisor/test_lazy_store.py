"""LazyStore: the store is opened at its first use, once; the repro thread waits until it is ready."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from phalanx.config import Settings
from phalanx.store.lite_writer import LiteWriter
from phalanx.store.migrations import HEAD
from phalanx.store.sql import SqlStore
from phalanx.supervisor.opener import LazyStore


def test_the_store_is_opened_at_the_first_use_and_once(store: SqlStore) -> None:
    opened: list[SqlStore] = []

    def open_it() -> SqlStore:
        opened.append(store)
        return store

    lazy = LazyStore(open_it)
    assert lazy.opened is None and opened == []
    assert lazy() is store and lazy() is store
    assert opened == [store] and lazy.opened is store
    assert LazyStore(store)() is store  # an open store is used as it is


def test_a_waiter_gets_the_store_once_it_is_ready_or_none_if_it_never_opened(store: SqlStore) -> None:
    lazy = LazyStore(store)
    got: list[object] = []
    waiter = threading.Thread(target=lambda: got.append(lazy.wait_ready()))
    waiter.start()
    lazy()
    assert got == []  # opened is not ready: the row may not exist yet
    lazy.ready()
    waiter.join(timeout=10)
    assert got == [store]
    never = LazyStore(store)
    never.ready()  # the end came before the store was ever needed
    assert never.wait_ready() is None


def test_the_lean_writer_records_where_it_opens_and_the_full_store_only_when_asked(
    store: SqlStore, tmp_path: Path
) -> None:
    """On an up-to-date SQLite file the lean writer records (no SQLAlchemy in the supervisor); the
    full store is opened only for what the writer hands on, once; elsewhere the full store records."""
    opened: list[SqlStore] = []

    def open_it() -> SqlStore:
        opened.append(store)
        return store

    url = Settings(home=tmp_path).database_url
    lean = LazyStore(open_it, lambda full: LiteWriter.open(url, HEAD, full))
    assert lean.any_open is None
    writer = lean()
    assert isinstance(writer, LiteWriter) and opened == []
    assert lean.any_open is writer
    assert lean.full() is store and lean.full() is store and opened == [store]
    elsewhere = LazyStore(open_it, lambda full: LiteWriter.open("postgresql://db/x", HEAD, full))
    assert elsewhere() is store  # no SQLite file to write: the full store records
    assert LazyStore(store, lambda full: pytest.fail("an open store is used as it is"))() is store
