"""LazyStore: the store is opened at its first use, once; the repro thread waits until it is ready."""

from __future__ import annotations

import threading

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
