"""The per-process reporter behind Task and Logger: report calls append to in-memory buffers (no
lock, no I/O); a daemon thread drains them into this process's spool file in batches.

``flush()`` drains, fsyncs, then waits (bounded) until the records are visible in the store: the
ingester's ack file for this stream (local), or the server's answer to the shipper (remote).
After ``os.fork()`` the child gets a fresh stream, empty buffers and its own writer thread (the
parent's unflushed points stay the parent's). Standard library only.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import operator
import os
import shutil
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from phalanx import knobs
from phalanx.machine.procs import pid_alive, pid_stopped
from phalanx.spool import SpoolWriter, encode_columns, encode_points, read_refused
from phalanx.tracking.identity import ENV_INGESTER_PID, Identity, rank_probe
from phalanx.tracking.screen import Problems, names_ok, screen_event, screen_points

log = logging.getLogger("phalanx.tracking")

CHUNK = 10_000  # scalar points per spool record: encoding one holds the GIL for about a millisecond
# While the spool's disk is full, records wait in memory up to this many points (about 40 bytes each,
# so 160 MB); beyond it new points are dropped, with a warning, and flush() returns False.
INTERVAL = 0.2  # seconds between background drains
DRAIN_POINTS = 4 * CHUNK  # scalar points a background drain writes at most before it looks again
FLUSH_TIMEOUT = 60.0

ScalarItem = tuple[str, str, int, float, float, int | None]  # title, series, step, value, time, rank
FIELDS = 6  # of a ScalarItem
# kind, data, time, rank, and the scalars reported before it (a drain writes it after those)
EventItem = tuple[str, dict[str, Any], float, int | None, int]


class Scalars:
    """The scalar points reported and not written yet, in order: one flat list, FIELDS items a
    point (every caller of ``append`` hands a whole ScalarItem: anything shorter would shift every
    later point). ``append`` is the list's ``extend``: a report call adds its point in one step under
    the interpreter's lock (no lock of ours, safe from any thread), and leaves no object for the
    garbage collector to scan (a tuple per point cost the reporting thread a collection every 700
    calls), while a drain takes each field of many points as one slice (issue 42)."""

    __slots__ = ("_flat", "_start", "append")

    def __init__(self) -> None:
        self._flat: list[Any] = []
        self._start = 0  # the points before it are taken: the list's front is cut once it is half
        self.append: Callable[[ScalarItem], None] = self._flat.extend

    def __len__(self) -> int:
        return (len(self._flat) - self._start) // FIELDS

    def take(self, n: int) -> list[Any]:
        """The first ``n`` points, flat, out of the buffer (by one drain at a time; reporters only
        ever add at its end). Cutting the front at every take moved the whole rest of a long backlog
        each time; a count read meanwhile (``Reporter.event``) may be too large, never too small."""
        end = self._start + n * FIELDS
        taken = self._flat[self._start : end]
        if 2 * end >= len(self._flat):
            self._start = 0  # first: a length read between the two steps counts the taken points too
            del self._flat[:end]
        else:
            self._start = end
        return taken

    def clear(self) -> None:
        self._start = 0
        self._flat.clear()


class Reporter:
    """Buffers and writes everything this process reports for one experiment."""

    def __init__(self, identity: Identity, *, interval: float = INTERVAL) -> None:
        self.identity = identity
        self.interval = interval
        self.scalars = Scalars()
        self.events: deque[EventItem] = deque()
        self._taken = 0  # scalars drained from the buffer so far (the events' order, see event())
        self.rank = rank_probe(identity.replica_rank)  # read at call time: see rank_probe
        self.ingester_alive: Callable[[], bool] | None = _ingester_from_env()
        self._files = itertools.count()
        self.problems = Problems()  # items that will not reach the store, and why (since last flush)
        self.last_problems: list[str] = []  # what the last flush() that returned False said
        self._refused_offset = 0  # how much of this stream's ingest refusals we have read
        self.pending: list[dict[str, Any]] = []  # records the disk had no room for yet, in order
        self._pending_points = 0
        self._max_pending = knobs.MAX_PENDING_POINTS.value()  # PHALANX_MAX_PENDING_POINTS
        self.disk_error: str | None = None  # set while the spool cannot be written
        self._in_drain = _InDrain()  # per thread: see _holding_stops
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
            attempt=ident.attempt,
        )
        self._drain_lock = threading.RLock()
        self._wake = threading.Event()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="phalanx-spool", daemon=True)
        self._thread.start()
        self.shipper: Any = None
        if ident.host:
            from phalanx.tracking.shipper import (  # why: no HTTP client in a replica with a local spool
                Shipper,
                ship_leftovers_in_background,
            )

            self.shipper = Shipper(self.writer, ident.host, ident.token)
            # what earlier processes of this host left unshipped (the server was down when they ended)
            ship_leftovers_in_background(ident.spool_dir.parent, ident.host, ident.token, self.writer.stream)

    def after_fork(self) -> None:
        """In a forked child: forget the parent's buffered items and stream, start our own."""
        self.scalars.clear()
        self.events.clear()
        self._taken = 0
        # and the parent's records waiting for disk space: written by the child too, they were
        # stored twice (and the parent's problems made the child's flush() return False)
        self.pending, self._pending_points, self.disk_error = [], 0, None
        self.problems, self.last_problems, self._refused_offset = Problems(), [], 0
        # the ingester by its pid: a plain script's parent polls the one it started, which a child
        # cannot (it looked ended at once, and the child's flush() returned False, saying nothing)
        self.ingester_alive = _ingester_from_env()
        self._start()

    # --- the hot path --------------------------------------------------------------------------

    def event(self, kind: str, data: dict[str, Any]) -> None:
        # the scalars reported before this event: the length is read first, then what drains took
        # (drain adds to it before it takes), so a drain running meanwhile can only make it larger
        # (never smaller: the event never goes first; larger is harmless, see drain)
        before = len(self.scalars) + self._taken
        self.events.append((kind, data, time.time(), self.rank(), before))

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
            # a full chunk waiting is written at once, not an interval later (unless the disk is full)
            if len(self.scalars) < CHUNK or self.disk_error is not None:
                self._wake.wait(self.interval)
                self._wake.clear()
            try:
                # while the disk is full, everything buffered goes through the bound at once (at most
                # DRAIN_POINTS a pass, a fast loop's points piled up in the buffer past the bound)
                self.drain(most=DRAIN_POINTS if self.disk_error is None else None)
            except Exception:  # never kill the training process over reporting
                log.exception("phalanx: writing the spool failed; will retry")

    def drain(self, most: int | None = None) -> int:
        """Write what is buffered to the spool (at most ``most`` scalar points of it: the background
        thread writes while a fast loop reports, so the ingester starts on the first chunks while
        the next are encoded); returns the last seq written."""
        with self._holding_stops(), self._drain_lock:
            if os.getpid() != self.pid:  # forked without our at-fork hook (os.fork in C code)
                self.after_fork()
            records = []
            n = len(self.scalars) if most is None else min(most, len(self.scalars))
            if n:
                self._taken += n  # before taking: see event()
                for rank, same in _by_rank(self.scalars.take(n)):
                    for i in range(0, len(same), CHUNK * FIELDS):
                        piece = same[i : i + CHUNK * FIELDS]
                        data = self._encode(piece)
                        if data is None:
                            continue
                        records.append(self.writer.record("scalar", data, time_=piece[4], rank=rank))
            # an event goes after the scalars reported before it: a drain that leaves some of those
            # buffered leaves the event too (a status 'succeeded' written before 300,000 points)
            n = len(self.events)
            if n:
                pop_event = self.events.popleft
                for _ in range(n):
                    # held only while scalars wait: once none does, every one reported before the
                    # event is written (a count that a racing drain made too large held a script's
                    # final status for good)
                    if self.events[0][4] > self._taken and self.scalars:
                        break
                    kind, data, when, rank, _ = pop_event()
                    screened = screen_event(kind, data, self.problems)
                    if screened is not None:
                        records.append(self.writer.record(kind, screened, time_=when, rank=rank))
            if self.pending:
                records = self._keep_within_bound(records)
                records, self.pending = self.pending + records, []
            if not records:
                return self.writer.last_seq
            try:
                last = self.writer.append(records)
            except OSError as exc:  # the disk is full: keep them (bounded) and try again next drain
                self.pending = records
                self._pending_points = sum(_points(r) for r in records)
                if self.disk_error is None:
                    log.warning(
                        "phalanx: cannot write the spool %s (%s); keeping what is reported in memory "
                        "(up to %d points) and writing it once there is space",
                        self.writer.path, exc.strerror or exc, self._max_pending,
                    )  # fmt: skip
                self.disk_error = f"{exc.strerror or exc} ({self.writer.spool_dir})"
                return self.writer.last_seq
            if self.disk_error is not None:
                log.warning("phalanx: the spool can be written again; %d records written", len(records))
            self.disk_error, self._pending_points = None, 0
            return last

    def _drain_in_pieces(self) -> int:
        """``drain`` everything, DRAIN_POINTS scalar points a spool write: the ingester stores the
        first pieces while the next are encoded (issue 42: a fast loop leaves most of its points to
        its flush, since the writer thread shares the interpreter's lock with it, and written in one
        piece they reached the spool, and the store, only once all were encoded). Returns the last
        seq written."""
        for _ in range(len(self.scalars) // DRAIN_POINTS):
            if self.disk_error is not None:  # the rest through the bound at once, not a try a piece
                break
            self.drain(most=DRAIN_POINTS)
        return self.drain()

    def _keep_within_bound(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """New records while older ones wait for disk space: scalar points past the bound are
        dropped (counted, so flush() says so); other events are small and kept."""
        kept = []
        for rec in records:
            n = _points(rec)
            if n and self._pending_points + n > self._max_pending:
                self.problems.add(
                    f"the disk is full ({self.disk_error}) and {self._max_pending} points already "
                    "wait in memory: newer points were dropped", n
                )  # fmt: skip
                continue
            self._pending_points += n
            kept.append(rec)
        return kept

    def _encode(self, piece: list[Any]) -> dict[str, Any] | None:
        """Points (flat, see Scalars) as one record's columns, without those the store would refuse
        (a bad name or step used to make ingest drop the whole record: 10,000 good points with it)."""
        try:
            data = encode_columns(
                piece[0::FIELDS], piece[1::FIELDS], piece[2::FIELDS], piece[3::FIELDS], piece[4::FIELDS]
            )
            if names_ok(data["keys"]):
                return data
        except TypeError:  # a step beyond 64 bits or not an integer; a name that is a list (unhashable)
            pass
        kept = screen_points(_as_items(piece), self.problems)
        return encode_points(kept) if kept else None

    def flush(self, wait: bool = True, timeout: float = FLUSH_TIMEOUT) -> bool:
        """Write and fsync what was reported; with ``wait``, also wait until it is in the store.
        True when it is visible there (or there was nothing to write), False after ``timeout``,
        when no ingester is running (the records stay in the spool for the next one), or when
        something reported since the last flush will never be stored: then the reasons are logged
        and kept in ``last_problems``."""
        with self._holding_stops():  # the fsync holds the writer's lock, which the writer thread may want
            last = self._drain_in_pieces()
            try:
                self.writer.sync()
            except OSError as exc:
                self.disk_error = self.disk_error or str(exc)
        stored = True
        waiting: str | None = None
        refused: list[str] = []
        if self.pending:  # nothing to wait for: these are not even in the spool yet
            waiting = (
                f"the spool cannot be written ({self.disk_error}): {len(self.pending)} records wait in "
                "memory and are written once it can"
            )
            stored = False
        elif wait and last >= 0:  # a SIGTERM while waiting is handled at once (nothing is held)
            if self.shipper is not None:
                stored = bool(self.shipper.wait(last, timeout))
                refused = self.shipper.take_refusals()
                why = None if stored else self.shipper.waiting_why
                waiting = None if why is None else f"kept in the spool: {why}"
            else:
                alive = self.ingester_alive
                if alive is not None and not alive():
                    stored = self.writer.acked() >= last
                else:
                    stored = self.writer.wait_for_ack(last, timeout, alive)
                refused, self._refused_offset = read_refused(
                    self.writer.spool_dir, self.writer.stream, self._refused_offset
                )
        with self._holding_stops():  # the problems' lock is not re-entrant: no flush from a handler inside
            for why in refused:
                self.problems.add(why)
            dropped, reasons = self.problems.take()
        if dropped:
            self.last_problems = reasons
            log.warning("phalanx: %d reported item(s) will not be stored: %s", dropped, "; ".join(reasons))
            return False
        if waiting:  # nothing is lost (the spool or memory keeps it, written or shipped later): say why
            self.last_problems = [f"not stored yet, {waiting}"]
            log.warning("phalanx: flush: %s", self.last_problems[0])
        return stored

    def close(self, wait: bool = True, timeout: float = FLUSH_TIMEOUT) -> bool:
        done = self.flush(wait=wait, timeout=timeout)
        self._stopped = True
        self._wake.set()
        if self.shipper is not None:
            self.shipper.stop()
        return done

    def wake(self) -> None:
        self._wake.set()

    # --- SIGTERM in the middle of a drain ----------------------------------------------------------

    def stop_after_drain(self, stop: Callable[[], None]) -> bool:
        """For SIGTERM's handler (tracking.lifecycle), which flushes and then ends the process: when
        the thread it interrupted is in the middle of a drain, keep ``stop`` for the moment that
        drain ends and return True (the handler returns at once); False when it is not (the handler
        goes on). A flush started inside the interrupted drain would not see the points that drain
        had taken (only in its locals), and the process ended without them."""
        here = self._in_drain
        if not here.depth:
            return False
        here.stop = stop
        return True

    @contextlib.contextmanager
    def _holding_stops(self) -> Iterator[None]:
        """Around a drain (from waiting for its lock on) and the other steps of flush() that hold a
        lock a flush needs: a SIGTERM arriving in there is left for the end (``stop_after_drain``).
        As the outermost of them ends, the stop runs: it flushes what is left, records the status
        and ends the process. Counted per thread: SIGTERM interrupts the main thread, while the
        writer thread drains too (the main thread's flush then waits for its drain to end)."""
        here = self._in_drain
        here.depth += 1
        try:
            yield
        finally:
            here.depth -= 1
            if not here.depth and here.stop is not None:
                stop, here.stop = here.stop, None
                stop()


class _InDrain(threading.local):
    """One thread's drains: how many it is inside, and a stop a signal handler left for their end."""

    def __init__(self) -> None:
        self.depth = 0
        self.stop: Callable[[], None] | None = None


def _as_items(flat: list[Any]) -> list[ScalarItem]:
    """Flat points (see Scalars) as tuples."""
    items = iter(flat)
    return list(zip(*[items] * FIELDS, strict=True))


def _by_rank(flat: list[Any]) -> Iterator[tuple[int | None, list[Any]]]:
    """Flat points in runs of one rank: (rank, the run's points, flat). A process's points are of
    one rank but where it changed (a spawned rank leaving its process group): then in order."""
    ranks = flat[FIELDS - 1 :: FIELDS]
    if len(set(ranks)) == 1:
        yield ranks[0], flat
        return
    for rank, run in itertools.groupby(_as_items(flat), key=_RANK_OF):
        yield rank, list(itertools.chain.from_iterable(run))


_RANK_OF = operator.itemgetter(FIELDS - 1)


def _points(record: Mapping[str, Any]) -> int:
    return int(record["data"].get("n", 0)) if record.get("kind") == "scalar" else 0


def _ingester_from_env() -> Callable[[], bool] | None:
    """How to tell whether an ingester is running: PHALANX_INGESTER_PID names its process ("0": none
    is; unset: unknown, so flush waits up to its timeout)."""
    value = os.environ.get(ENV_INGESTER_PID, "").strip()
    if not value.isdigit():
        return None
    pid = int(value)
    if pid == 0:
        return lambda: False
    # a stopped ingester (SIGSTOP, a suspended `phalanx run`) acknowledges nothing: do not wait for it
    return lambda: pid_alive(pid) and not pid_stopped(pid)


def jsonable(value: Any) -> Any:
    """Parameters as JSON values: containers kept, anything else as its str()."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return str(value)
