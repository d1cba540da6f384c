"""The supervisor's store, opened when first needed: after the first group has started (opening
it and checking the schema then overlap with the replicas' own start-up), or earlier when the
experiment's row must exist first (it waits in the machine's queue, it is resumed).

On an up-to-date SQLite file it records through the lean writer (``store.lite_writer``: no
SQLAlchemy, about 0.2 CPU-s less per submission), which hands what it does not write itself to
the full store, opened then (``full``)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from phalanx.store.base import LocalStore
    from phalanx.store.run_store import RunStore

# opens the lean writer handed the full store's opener, or None where the full store must record
LiteOpener = Callable[[Callable[[], "LocalStore"]], "RunStore | None"]


class LazyStore:
    """``store``: the open store, or a function that opens it (called once, at the first use).
    ``lite``: where ``store`` is a function, the lean writer's opener, tried first.

    ``ready()`` says the experiment's row exists (or that it never will): the thread that records
    what the experiment runs waits for it (``wait_ready``) before it writes."""

    def __init__(self, store: LocalStore | Callable[[], LocalStore], lite: LiteOpener | None = None) -> None:
        self._source = store
        self._lite = lite if callable(store) else None
        self._full: LocalStore | None = None if callable(store) else store
        self.opened: RunStore | None = None  # what records, once opened
        self._ready = threading.Event()
        self._opening = threading.Lock()
        self._opening_full = threading.Lock()

    def __call__(self) -> RunStore:
        """What records, opened now if it was not yet: the lean writer where it can, else the
        full store."""
        with self._opening:
            if self.opened is None:
                lite = None if self._lite is None else self._lite(self.full)
                self.opened = lite if lite is not None else self.full()
            return self.opened

    def full(self) -> LocalStore:
        """The full store (SQLAlchemy), opened now if it was not yet: what the lean writer hands
        on, and what reads and writes beyond a run's own rows need (quotas, secrets, the queue)."""
        with self._opening_full:
            if self._full is None:
                assert callable(self._source)
                self._full = self._source()
            return self._full

    @property
    def any_open(self) -> RunStore | None:
        """What is open of the two (the recording store first), None when neither was opened yet:
        a store to ask whether the experiment was recorded, opening nothing."""
        return self.opened or self._full

    def ready(self) -> None:
        self._ready.set()

    def wait_ready(self) -> RunStore | None:
        """Once ``ready()`` was called: the store, or None when it was never opened."""
        self._ready.wait()
        return self.opened
