"""Recent chart answers of finished experiments, kept a few seconds.

Twenty people looking at the same big finished run ask for the same bytes; the first read pays
for the summary read and the encoding, the others are answered from here on the event loop, without
a thread or the store. Only a finished experiment's answers are kept (a running one gains points
every few seconds), and for ``ttl`` seconds at most: points that reach a finished experiment late
(a replica's spool flushed after the end), a deletion or the store's own sweeper show within that.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Hashable

Answer = tuple[bytes, dict[str, str]]


class ChartCache:
    """An LRU of answers bounded by count and bytes, each valid ``ttl`` seconds."""

    def __init__(self, ttl: float = 10.0, max_entries: int = 256, max_bytes: int = 32 << 20) -> None:
        self.ttl = ttl
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._entries: OrderedDict[Hashable, tuple[float, Answer]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0

    def get(self, key: Hashable) -> Answer | None:
        with self._lock:
            found = self._entries.get(key)
            if found is None:
                return None
            if time.monotonic() > found[0]:
                self._drop(key)
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return found[1]

    def put(self, key: Hashable, answer: Answer) -> None:
        size = len(answer[0])
        if size > self.max_bytes // 4:
            return  # an export-sized answer would push everything else out
        with self._lock:
            if key in self._entries:
                self._drop(key)
            self._entries[key] = (time.monotonic() + self.ttl, answer)
            self._bytes += size
            while len(self._entries) > self.max_entries or self._bytes > self.max_bytes:
                self._drop(next(iter(self._entries)))

    def _drop(self, key: Hashable) -> None:
        _, (body, _) = self._entries.pop(key)
        self._bytes -= len(body)
