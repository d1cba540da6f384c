"""The per-process reporter behind Task and Logger: report calls append to in-memory deques (no
lock, no I/O); a daemon thread drains them into this process's spool file in batches.

``flush()`` drains, fsyncs, then waits (bounded) until the records are visible in the store: the
ingester's ack file for this stream (local), or the server's answer to the shipper (remote).
After ``os.fork()`` the child gets a fresh stream, empty buffers and its own writer thread (the
parent's unflushed points stay the parent's). Standard library only.
"""

from __future__ import annotations

import itertools
import logging
import os
import shutil
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from phalanx.tracking.identity import ENV_INGESTER_PID, Identity
from phalanx.tracking.processes import pid_alive
from phalanx.tracking.spool import SpoolWriter, encode_points

log = logging.getLogger("phalanx.tracking")

CHUNK = 10_000  # scalar points per spool record: encoding one holds the GIL for about a millisecond
INTERVAL = 0.2  # seconds between background drains
FLUSH_TIMEOUT = 60.0

ScalarItem = tuple[str, str, int, float, float]  # title, series, step, value, time


class Reporter:
    """Buffers and writes everything this process reports for one experiment."""

    def __init__(self, identity: Identity, *, interval: float = INTERVAL) -> None:
        self.identity = identity
        self.interval = interval
        self.scalars: deque[ScalarItem] = deque()
        self.events: deque[tuple[str, dict[str, Any], float]] = deque()
        self.ingester_alive: Callable[[], bool] | None = _ingester_from_env()
        self._files = itertools.count()
        self._start()

    def _start(self) -> None:
        ident = self.identity
        self.pid = os.getpid()
        self.writer = SpoolWriter(
            ident.spool_dir,
            experiment_id=ident.experiment_id,
            replica=ident.replica,
            role=ident.role,
            index=ident.index,
            rank=ident.replica_rank,
        )
        self._drain_lock = threading.RLock()  # a SIGTERM handler may flush mid-drain
        self._wake = threading.Event()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="phalanx-spool", daemon=True)
        self._thread.start()
        self.shipper: Any = None
        if ident.host:
            from phalanx.tracking.shipper import Shipper

            self.shipper = Shipper(self.writer, ident.host, ident.token)

    def after_fork(self) -> None:
        """In a forked child: forget the parent's buffered items and stream, start our own."""
        self.scalars.clear()
        self.events.clear()
        self._start()

    # --- the hot path --------------------------------------------------------------------------

    def event(self, kind: str, data: dict[str, Any]) -> None:
        self.events.append((kind, data, time.time()))

    def file_slot(self, filename: str) -> tuple[str, Path]:
        """A fresh place in the spool for a file an event will name: (path relative to the spool
        folder, absolute path). Ingest moves what is written there into the artifact store."""
        rel = f"files/{self.writer.stream}/{next(self._files)}/{filename}"
        return rel, self.identity.spool_dir / rel

    def add_file(self, kind: str, data: dict[str, Any], source: str | os.PathLike[str]) -> None:
        """Copy ``source`` (file or folder) into the spool now, then queue the event naming it; ingest
        moves the copy to ``data['path']`` in the artifact store."""
        source = Path(source)
        rel, target = self.file_slot(source.name)
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target)
        else:
            shutil.copyfile(source, target)
        self.event(kind, {**data, "spool_path": rel})

    # --- writing -------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stopped:
            self._wake.wait(self.interval)
            self._wake.clear()
            try:
                self.drain()
            except Exception:  # never kill the training process over reporting
                log.exception("phalanx: writing the spool failed; will retry")

    def drain(self) -> int:
        """Write everything buffered to the spool; returns the last seq written."""
        with self._drain_lock:
            if os.getpid() != self.pid:  # forked without our at-fork hook (os.fork in C code)
                self.after_fork()
            records = []
            rank = self.identity.rank()
            n = len(self.scalars)
            if n:
                pop = self.scalars.popleft
                points = [pop() for _ in range(n)]
                for i in range(0, n, CHUNK):
                    chunk = points[i : i + CHUNK]
                    records.append(
                        self.writer.record("scalar", encode_points(chunk), time_=chunk[0][4], rank=rank)
                    )
            n = len(self.events)
            if n:
                pop_event = self.events.popleft
                for _ in range(n):
                    kind, data, when = pop_event()
                    records.append(self.writer.record(kind, data, time_=when, rank=rank))
            return self.writer.append(records) if records else self.writer.last_seq

    def flush(self, wait: bool = True, timeout: float = FLUSH_TIMEOUT) -> bool:
        """Write and fsync what was reported; with ``wait``, also wait until it is in the store.
        True when it is visible there (or there was nothing to write), False after ``timeout``
        or when no ingester is running (the records stay in the spool for the next one)."""
        last = self.drain()
        self.writer.sync()
        if not wait or last < 0:
            return True
        if self.shipper is not None:
            return bool(self.shipper.wait(last, timeout))
        alive = self.ingester_alive
        if alive is not None and not alive():
            return self.writer.acked() >= last
        return self.writer.wait_for_ack(last, timeout, alive)

    def close(self, wait: bool = True, timeout: float = FLUSH_TIMEOUT) -> bool:
        done = self.flush(wait=wait, timeout=timeout)
        self._stopped = True
        self._wake.set()
        if self.shipper is not None:
            self.shipper.stop()
        return done

    def wake(self) -> None:
        self._wake.set()


def _ingester_from_env() -> Callable[[], bool] | None:
    """How to tell whether an ingester is running: PHALANX_INGESTER_PID names its process ("0": none
    is; unset: unknown, so flush waits up to its timeout)."""
    value = os.environ.get(ENV_INGESTER_PID, "").strip()
    if not value.isdigit():
        return None
    pid = int(value)
    if pid == 0:
        return lambda: False
    return lambda: pid_alive(pid)


def jsonable(value: Any) -> Any:
    """Parameters as JSON values: containers kept, anything else as its str()."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return str(value)
