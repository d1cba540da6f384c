"""Outages are answered, not crashed: with the database or the disk gone, a request is answered
503 with ``Retry-After`` and one line saying why, and the server's log gets one line per outage
(not a traceback per request). A client retries a submit with its Idempotency-Key (apiclient),
which never starts it twice; nothing half-written is left (a submit writes its rows in one
transaction, after its files, which it removes again when the transaction fails)."""

from __future__ import annotations

import logging
import threading
import time

from phalanx.store.outages import unavailable

log = logging.getLogger(__name__)

RETRY_AFTER_SECONDS = 5
QUIET_SECONDS = 60.0  # one log line per outage: the same reason again within this is not logged

__all__ = ["QUIET_SECONDS", "RETRY_AFTER_SECONDS", "OutageLog", "unavailable"]


class OutageLog:
    """Logs an outage's reason once, then again only after QUIET_SECONDS without it."""

    def __init__(self) -> None:
        self._last: dict[str, float] = {}
        self._lock = threading.Lock()

    def note(self, method: str, path: str, reason: str) -> None:
        now = time.monotonic()
        with self._lock:
            quiet = now - self._last.get(reason, float("-inf")) < QUIET_SECONDS
            self._last[reason] = now
        if not quiet:
            log.error(
                "%s %s answered 503: %s (requests failing the same way are not logged for %.0f s)",
                method,
                path,
                reason,
                QUIET_SECONDS,
            )
