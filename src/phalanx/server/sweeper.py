"""The server's periodic garbage collection: what `phalanx gc` does, every ``gc_hours``.

Why: a team's server runs for weeks while experiments are deleted and scripts are killed; their run
folders and spools would pile up on disk and the store would keep the pages `delete` freed. The
sweep runs in a daemon thread (never on a request), first after one period, and a failure is
logged, never raised: a sweep must not take the server down.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from phalanx import gc
from phalanx.config import Settings

if TYPE_CHECKING:
    from phalanx.store.base import LocalStore

log = logging.getLogger(__name__)


class Sweeper:
    """Calls ``phalanx.gc.collect`` every ``period`` seconds until ``stop()``."""

    def __init__(
        self, store: LocalStore, settings: Settings, period: float, *, min_age: float | None = None
    ) -> None:
        self.store = store
        self.settings = settings
        self.period = period
        self.sweeps = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="phalanx-gc", daemon=True)

    def start(self) -> Sweeper:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.wait(self.period):
            try:
                done = gc.collect(self.store, self.settings)
                self.sweeps += 1
                log.info("gc: %s", done.to_json())
            except Exception:
                log.exception("gc: the periodic sweep failed; it runs again in %.0f s", self.period)
