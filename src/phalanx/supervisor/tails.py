"""Following each replica's console while it runs: its log lines to the terminal, a short tail for
a failure's reason, and the spool (so the store gets every line, however many)."""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator

from phalanx.backends.logfiles import split_stream
from phalanx.domain import Replica

log = logging.getLogger(__name__)

SPOOL_BATCH_LINES = 1000  # console lines per spooled LOG event, at most
TAIL_STALL_SECONDS = 30  # a replica's log reader that takes no line for this long is given up on
TAIL_LINES = 10  # log lines quoted in a failed experiment's reason


class LogTail:
    """One thread per replica: its log lines -> the observer and a short tail at once, and to the
    spool as LOG events of many lines each. One event per line cost a JSON record, two system
    calls and a database row per line: at 200,000 lines a replica the reader fell far behind the
    replica. A batch is written once it is full, and whatever it holds at each poll of the
    supervisor (``flush``), so a line reaches the spool within a poll however slowly a replica prints."""

    def __init__(
        self,
        lines: Iterator[str],
        replica: Replica,
        sink: Callable[[Replica, str], None],
        spool: Callable[[Replica, list[str], str], None],
    ) -> None:
        self.last: deque[str] = deque(maxlen=TAIL_LINES)
        self.count = 0  # lines taken so far: a reader still making progress is waited for
        self._lines = lines
        self._replica = replica
        self._sink = sink
        self._spool = spool
        self._batch: list[tuple[str, str]] = []  # (stream, text)
        self._lock = threading.Lock()
        self.name = replica.name
        self.thread = threading.Thread(target=self._run, name=f"tail-{replica.name}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            for raw in self._lines:
                stream, text = split_stream(raw)  # the local engine marks its replicas' stderr lines
                self.last.append(text)
                with self._lock:
                    self._batch.append((stream, text))
                    full = len(self._batch) >= SPOOL_BATCH_LINES
                if full:
                    self.flush()
                self._sink(self._replica, text)
                self.count += 1
        except Exception:  # a log reader's trouble must not take the supervisor down
            log.exception("reading the log of %s failed", self._replica.name)
        finally:
            self.flush()

    def flush(self) -> None:
        """Spool the lines taken and not yet spooled (in order: one flush at a time), one LOG
        event per run of lines of the same stream."""
        with self._lock:
            batch, self._batch = self._batch, []
            run: list[str] = []
            for i, (stream, text) in enumerate(batch):
                run.append(text)
                if i + 1 == len(batch) or batch[i + 1][0] != stream:
                    self._spool(self._replica, run, stream)
                    run = []


def join_tails(tails: Iterable[LogTail]) -> None:
    """Wait for every replica's log reader to reach the end of its log. The replicas have
    ended, so each reads a file that no longer grows: however long the console (a replica
    printing 500,000 lines keeps its reader busy well after it exits on a loaded machine), the
    reader is waited for as long as it makes progress; only one stuck for TAIL_STALL_SECONDS
    is given up on (the supervisor then counts the lines it could not spool in its outcome)."""
    for tail in tails:
        seen, still = tail.count, 0
        while tail.thread.is_alive():
            tail.thread.join(timeout=1.0)  # real seconds (a test's virtual clock never moves here)
            if tail.count != seen:
                seen, still = tail.count, 0
            elif still >= TAIL_STALL_SECONDS:
                log.warning("the log reader of %s made no progress for %.0f s", tail.name, still)
                break
            else:
                still += 1
