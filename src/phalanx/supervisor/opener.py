"""The supervisor's store, opened when first needed: after the first group has started (importing
SQLAlchemy and checking the schema then overlap with the replicas' own start-up), or earlier when
the experiment's row must exist first (it waits in the machine's queue, it is resumed)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from phalanx.store.base import LocalStore


class LazyStore:
    """``store``: the open store, or a function that opens it (called once, at the first use).

    ``ready()`` says the experiment's row exists (or that it never will): the thread that records
    what the experiment runs waits for it (``wait_ready``) before it writes."""

    def __init__(self, store: LocalStore | Callable[[], LocalStore]) -> None:
        self._source = store
        self.opened: LocalStore | None = None
        self._ready = threading.Event()

    def __call__(self) -> LocalStore:
        """The store, opened now if it was not yet."""
        if self.opened is None:
            self.opened = self._source() if callable(self._source) else self._source
        return self.opened

    def ready(self) -> None:
        self._ready.set()

    def wait_ready(self) -> LocalStore | None:
        """Once ``ready()`` was called: the store, or None when it was never opened."""
        self._ready.wait()
        return self.opened
