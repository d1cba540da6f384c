"""Ingest: spool files -> store, exactly once.

Each spool file (one per writing process, see ``phalanx.spool``) is read from the byte
offset the store last committed for it; its complete records become events that are written
together with the new offset in one transaction (``IngestStore.ingest_batch``), so a crash of the
writer, of the ingester or of the database at any point neither loses nor repeats a record. Files a
record names (artifacts, models) are copied into the artifact store before that transaction
(an idempotent overwrite) and removed from the spool after it. After each commit an ack file tells
``task.flush()`` that its records are visible.

Records become events as ``store.spool_records`` checks them (the server's ingest endpoint checks
those arriving over HTTP alike). ``python -m phalanx.ingest --spool DIR [--follow-pid PID]`` runs
it.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import logging
import os
import shutil
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from phalanx.config import Settings
from phalanx.domain import Event, EventKind
from phalanx.errors import UsageError
from phalanx.ingest_helpers import CANNOT_HELP, IDLE_PASSES, STOP_BYTES, Helpers
from phalanx.machine.procs import INGESTER_RECORD, pid_alive, record_process, recorded_process, writer_gone
from phalanx.reconcile import reconcile
from phalanx.spool import (
    ACK_SUFFIX,
    REFUSED_SUFFIX,
    SpoolWriter,
    read_ack,
    read_records,
    spool_files,
    taking,
    write_ack,
    write_refused,
)
from phalanx.store import open_store
from phalanx.store.artifacts import ArtifactStore, safe_path
from phalanx.store.batch import check_event, name, scalar_block
from phalanx.store.lite_writer import LiteWriter
from phalanx.store.migrations import HEAD
from phalanx.store.spool_records import FILE_KINDS, record_to_event
from phalanx.tracking.console import relay, relay_lock_path
from phalanx.tracking.identity import Identity
from phalanx.tracking.screen import truncate_line

if TYPE_CHECKING:
    from phalanx.store.base import IngestStore
    from phalanx.store.run_store import SpoolSink

log = logging.getLogger(__name__)

# how long a pass that must see everything waits for a batch another ingester holds before it reads
# the file beside it (the store's compare-and-set still keeps each record once)
PATIENCE_S = 2.0


class Ingester:
    """Moves what spool files hold into the store. ``spool``: a folder holding ``*.spool`` files or
    folders of them (``<home>/spool`` or one experiment's ``<home>/spool/<id>``). Several ingesters
    may run over the same files at once (the supervisor's and a CLI command's): positions are
    compared-and-set in the store, so each record is stored once. ``claimed``: also the streams a
    shipper claimed for a server (``spool.spool_files``): a supervisor's own experiment's folder,
    whose store is where its records belong (the server's own, or this machine's); a read pass
    over every folder leaves them to their shipper."""

    def __init__(
        self,
        store: SpoolSink,
        artifacts: ArtifactStore | None,
        spool: str | os.PathLike[str],
        *,
        batch_bytes: int = 2 << 20,
        cleanup: bool = True,
        claimed: bool = False,
        helpers: Helpers | None = None,
    ) -> None:
        self.store = store
        self.helpers = helpers  # processes started to share a flood of points (``ingest_helpers``)
        self.claimed = claimed
        self.artifacts = artifacts if artifacts is not None else store.artifact_store
        self.spool = Path(spool)
        self.batch_bytes = batch_bytes
        self.cleanup = cleanup
        self._positions: dict[str, int] = {}  # stream -> committed offset, as far as we know

    def spool_files(self) -> list[Path]:
        return spool_files(self.spool, claimed=self.claimed) if self.spool.is_dir() else []

    def run_once(self, skip_held: bool = False) -> int:
        """One pass over every spool file; returns how many new events were stored. A file another
        ingester is working on (``spool.taking``) is left to it with ``skip_held`` (an ingester that
        passes again soon, or one of several sharing a flood); else its batch is waited for, up to
        PATIENCE_S, and the file read beside it after that (a stopped holder never holds a
        pass that must see everything)."""
        total = 0
        for path in self.spool_files():
            try:
                total += self.ingest_file(path, skip_held)
            except FileNotFoundError:
                continue  # removed meanwhile (experiment deleted)
            except Exception as exc:  # one stream's trouble must not hold up every other stream
                # one line, not a traceback per file and pass: a database outage is expected
                log.warning("%s: ingest failed (%s); will retry", path, _one_line(exc))
                log.debug("ingest failure", exc_info=True)
                self._positions.pop(path.stem, None)
        return total

    def waiting(self) -> tuple[int, int]:
        """(bytes of spool files not ingested yet as far as this ingester knows, files holding them)."""
        waiting = files = 0
        for path in self.spool_files():
            with contextlib.suppress(FileNotFoundError):
                left = path.stat().st_size - self._positions.get(path.stem, 0)
                if left > 0:
                    waiting, files = waiting + left, files + 1
        return waiting, files

    def pending(self) -> bool:
        """Whether some spool file holds bytes not yet ingested."""
        for path in self.spool_files():
            known = self._positions.get(path.stem)
            if known is None or path.stat().st_size > known:
                return True
        return False

    def run(self, stop: threading.Event, interval: float = 0.2, lease: Path | None = None) -> None:
        """Ingest until ``stop`` is set, then a final pass so nothing written before it is left.
        ``lease``: the record (``runs/<id>/ingester.pid``, see ``following``) naming this process
        as the one that drains this folder while it runs."""
        with following(lease):
            while not stop.is_set():
                try:
                    n = self.run_once(skip_held=True)
                except Exception:  # keep the supervisor's ingester alive through a transient error
                    log.exception("ingest pass failed; retrying")
                    n = 0
                if n == 0:
                    stop.wait(interval)
            if self.helpers is not None:
                self.helpers.stop()
            self.run_once()  # the last: what another ingester holds too

    def ingest_file(self, path: Path, skip_held: bool = False, stop: threading.Event | None = None) -> int:
        """Ingest what spool file ``path`` holds, a batch at a time (none once ``stop`` is set);
        returns how many new events were stored. A batch another ingester holds: see ``run_once``."""
        stream = path.stem
        total = 0
        patience = 0.0 if skip_held else PATIENCE_S
        while stop is None or not stop.is_set():
            known = self._positions.get(stream)
            if known is not None and path.stat().st_size <= known:
                self._remove_if_finished(path, stream)
                return total
            with taking(path, patience) as held:
                if not held and skip_held:
                    return total
                if not held:  # its holder is slow or stopped: this file's next batches neither wait
                    patience = 0.0
                n = self._ingest_batch(path, stream)
            if n is None:
                self._remove_if_finished(path, stream)
                return total
            total += n
            if self.helpers is not None and self.helpers.most:
                self.helpers.grow(*self.waiting())
        return total

    def _ingest_batch(self, path: Path, stream: str) -> int | None:
        """The next batch of ``path``, ingested (how many of its events were new); None when the
        file holds no complete record past the committed position. Its caller holds the file."""
        while True:
            size = path.stat().st_size
            # what is committed now: another ingester may have taken batches since this one looked
            start, committed = self.store.ingest_position(stream)
            self._positions[stream] = start
            if size <= start:
                # its ingester ended between commit and ack (a file removed meanwhile needs none)
                if committed >= 0 and read_ack(path.parent, stream) < committed and path.exists():
                    write_ack(path.parent, stream, committed)
                return None
            records, end = read_records(path, start, self.batch_bytes)
            if end == start:  # only a partial record so far (or forever, if its writer was killed)
                return None
            events, files, last_seq = self._convert(path, records)
            missing = self._copy_files(files)
            if missing:
                self._positions.pop(stream, None)
                if self.store.ingest_position(stream)[0] != start:
                    continue  # another ingester stored this batch and removed its files
                for src in missing:
                    log.warning("%s: file %s named by a record is missing; stored without it", path, src)
            try:
                n = self.store.ingest_batch(stream, start, end, last_seq, events)
            except UsageError as exc:  # a record whose shape passed but whose content did not
                log.warning("%s: %s; storing the batch without the malformed parts", path, exc)
                events = salvage(events, lambda ev, why: write_refused(path.parent, stream, ev.seq, why))
                n = self.store.ingest_batch(stream, start, end, last_seq, events)
            if n is None:  # another ingester moved the position (one that takes no lock): reread it
                continue
            self._positions[stream] = end
            if last_seq >= 0:
                write_ack(path.parent, stream, last_seq)
            for src, _, _ in files:
                _remove(src)
            return n

    def _remove_if_finished(self, path: Path, stream: str) -> None:
        """A fully ingested file whose writer has exited is done: remove it (its position stays in
        the store, so a stray copy would still not be ingested twice)."""
        if not self.cleanup or not writer_gone(stream):
            return
        for leftover in (path, path.with_suffix(ACK_SUFFIX), path.with_suffix(REFUSED_SUFFIX)):
            leftover.unlink(missing_ok=True)
        shutil.rmtree(path.parent / "files" / stream, ignore_errors=True)
        self._positions.pop(stream, None)

    def _convert(
        self, path: Path, records: Sequence[Any]
    ) -> tuple[list[Event], list[tuple[Path, str, str]], int]:
        events: list[Event] = []
        files: list[tuple[Path, str, str]] = []  # (spool file, experiment, artifact-store path)
        last_seq = -1
        for rec in records:
            if rec is None:
                log.warning("%s: skipped a line that is not JSON", path)
                continue
            seq = rec.get("seq") if isinstance(rec, dict) else None
            if isinstance(seq, int):
                last_seq = max(last_seq, seq)  # acknowledged even if skipped: nobody waits in vain
            try:
                ev = record_to_event(rec)
            except UsageError as exc:
                log.warning("%s: skipped a malformed record: %s", path, exc)
                if isinstance(seq, int):
                    write_refused(path.parent, path.stem, seq, exc.message)
                continue
            spool_path = rec.get("data", {}).get("spool_path") if ev.kind.value in FILE_KINDS else None
            if spool_path:
                src = path.parent / safe_path(str(spool_path))
                files.append((src, ev.experiment_id, str(ev.data["path"])))
            events.append(ev)
        return events, files, last_seq

    def _copy_files(self, files: list[tuple[Path, str, str]]) -> list[Path]:
        """Copy spool files into the artifact store; returns those that were not there."""
        if files and self.artifacts is None:
            raise UsageError("this store has no artifact store; cannot ingest files")
        missing = []
        for src, experiment_id, dest in files:
            assert self.artifacts is not None
            try:
                self.artifacts.put_file(experiment_id, dest, src)
            except FileNotFoundError:
                missing.append(src)
        return missing


@contextlib.contextmanager
def following(lease: Path | None) -> Iterator[None]:
    """While inside, ``lease`` ("pid start-time host", ``runs/<id>/ingester.pid``) names this
    process as the one following spool/<id>: a read command leaves that folder to it instead of
    ingesting it itself (``readpass``). Removed on the way out if it still names this process; a
    process killed inside leaves a record of a dead process, which no read trusts."""
    if lease is None:
        yield
        return
    with contextlib.suppress(OSError):  # no record: reads ingest the folder themselves, as before
        record_process(lease)
    try:
        yield
    finally:
        if recorded_process(lease) == os.getpid():
            lease.unlink(missing_ok=True)


def lease_for(settings: Settings, spool: Path) -> Path | None:
    """Where an ingester following ``spool`` records itself: ``runs/<id>/ingester.pid`` for an
    experiment's folder ``spool/<id>``; None for any other folder (reads judge it file by file)."""
    if spool.resolve().parent != settings.spool_dir.resolve():
        return None
    return settings.runs_dir / spool.name / INGESTER_RECORD


def salvage(events: Sequence[Event], refused: Any = None) -> list[Event]:
    """The events without what the store refuses: an invalid event is left out, except that the
    good points of a SCALAR event are kept (one over-long metric name among 10,000 points used to
    take all of them). ``refused(event, why)`` hears about each event (or part) left out."""
    kept: list[Event] = []
    for ev in events:
        try:
            check_event(ev)
            kept.append(ev)
            continue
        except UsageError as exc:
            why = exc.message
        if ev.kind is EventKind.SCALAR:
            try:
                block = scalar_block(ev)
            except UsageError:
                block = None
            if block is not None:
                good = set()
                for key in block.keys:
                    try:
                        name(key[0]), name(key[1])
                        good.add(key)
                    except UsageError as exc:
                        why = f"metric {key[0][:40]!r}/{key[1][:40]!r}: {exc.message}"
                points = [
                    [
                        *block.keys[0 if block.idx is None else block.idx[i]],
                        block.steps[i],
                        block.values[i],
                        t,
                    ]
                    for i, t in enumerate(block.times)
                ]
                points = [p for p in points if (p[0], p[1]) in good]
                if points:
                    part = dataclasses.replace(ev, data={"points": points})
                    if _valid(part):
                        kept.append(part)
        if refused is not None:
            refused(ev, why)
    return kept


def _one_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0][:200]}" if lines else type(exc).__name__


def _valid(event: Event) -> bool:
    try:
        check_event(event)
    except UsageError:
        return False
    return True


def _remove(path: Path) -> None:
    try:
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
    except FileNotFoundError:
        pass


def ingest_pending(store: IngestStore, spool: str | os.PathLike[str]) -> int:
    """One pass over a spool folder (what every read command of the CLI does first)."""
    return Ingester(store, store.artifact_store, spool).run_once()


def _start_relays(
    console_fds: str | None, spool: str | os.PathLike[str], script_pid: int | None = None
) -> list[threading.Thread]:
    """Threads relaying a plain script's console pipes (``--console-fds``) to its terminal and, as
    LOG records of its experiment, to the spool: from this process, which outlives the script."""
    if not console_fds:
        return []

    out_r, err_r, term_out, term_err = (int(x) for x in console_fds.split(","))
    ident = Identity.from_env()
    if ident is None:
        return []
    writer = SpoolWriter(
        Path(spool), experiment_id=ident.experiment_id, replica=ident.replica, role=ident.role,
        index=ident.index, rank=ident.replica_rank,
    )  # fmt: skip

    def sink(name: str, lines: list[str]) -> None:
        with contextlib.suppress(OSError, ValueError):  # a full disk: the terminal still got them
            writer.write("log", {"stream": name, "lines": [truncate_line(line) for line in lines]})

    lock = relay_lock_path(Path(spool), script_pid) if script_pid else None
    threads = [
        threading.Thread(target=relay, args=(fd, term, name, sink, lock), name=f"relay-{name}", daemon=True)
        for fd, term, name in ((out_r, term_out, "stdout"), (err_r, term_err, "stderr"))
    ]
    for thread in threads:
        thread.start()
    return threads


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m phalanx.ingest", description="Ingest spool files.")
    parser.add_argument("--spool", help="spool folder (default: $PHALANX_HOME/spool)")
    parser.add_argument("--follow-pid", type=int, help="run until this process exits, then finish")
    parser.add_argument("--interval", type=float, default=0.1, help="seconds between passes")
    parser.add_argument("--once", action="store_true", help="one pass, then exit")
    parser.add_argument("--batch-bytes", type=int, default=2 << 20, help="spool bytes per transaction")
    parser.add_argument(
        "--console-fds", help="OUT,ERR,TERM_OUT,TERM_ERR: relay the followed script's console pipes"
    )
    parser.add_argument(
        "--until-idle", action="store_true", help="help another ingester until little waits (ingest_helpers)"
    )
    parser.add_argument("--claimed", action="store_true", help="also the streams a shipper claimed")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")

    settings = Settings()
    if args.until_idle:
        return _help(settings, Path(args.spool or settings.spool_dir), args.claimed, args.batch_bytes)
    store = open_store(settings)
    ingester = Ingester(
        store, store.artifact_store, args.spool or settings.spool_dir, batch_bytes=args.batch_bytes
    )
    if args.once or args.follow_pid is None:
        n = ingester.run_once()
        log.info("ingested %d events", n)
        return 0
    relays = _start_relays(args.console_fds, args.spool or settings.spool_dir, args.follow_pid)
    with following(lease_for(settings, ingester.spool)):
        _follow(ingester, args.follow_pid, args.interval, relays)
    try:  # a script killed before it recorded its end (SIGKILL, OOM, segfault) is marked failed now
        reconcile(store, settings)
    except Exception:
        log.exception("checking unfinished experiments failed")
    return 0


def _help(settings: Settings, spool: Path, claimed: bool, batch_bytes: int) -> int:
    """A helper's life (``ingest_helpers``): passes over ``spool`` through the standard library's
    ``sqlite3`` until what waits there falls under ``STOP_BYTES``, nothing was its to take for
    IDLE_PASSES passes, it is stopped (after its batch), a pass failed (1), or its supervisor is
    gone. CANNOT_HELP where the store is not an up-to-date SQLite file."""
    held: list[IngestStore] = []

    def full() -> IngestStore:  # a batch the lean writer hands on (files, a later attempt's points)
        if not held:
            held.append(open_store(settings))
        return held[0]

    store = LiteWriter.open(settings.database_url, HEAD, full, settings.artifacts_root)
    if store is None:  # not an up-to-date SQLite file: its ingester goes on alone
        return CANNOT_HELP
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())  # its ingester's last pass: after this batch
    parent = os.getppid()
    ingester = Ingester(store, None, spool, batch_bytes=batch_bytes, cleanup=False, claimed=claimed)
    idle = 0  # passes in a row that stored nothing
    while os.getppid() == parent and idle < IDLE_PASSES and not stop.is_set():
        stored = 0
        for path in ingester.spool_files():
            try:
                stored += ingester.ingest_file(path, skip_held=True, stop=stop)
            except FileNotFoundError:
                continue  # ingested and removed meanwhile
            except Exception as exc:  # its ingester goes on alone, and says why if it fails too
                log.warning("%s: ingest failed (%s); this helper ends", path, _one_line(exc))
                return 1
        idle = 0 if stored else idle + 1
        if stored == 0:
            waiting, _ = ingester.waiting()
            if waiting < STOP_BYTES:
                return 0
            time.sleep(0.01)  # every waiting file is another ingester's this moment
    return 0  # its ingester is gone, or none of what waits has been its own for a while


def _follow(ingester: Ingester, pid: int, interval: float, relays: Sequence[threading.Thread]) -> None:
    """Ingest while process ``pid`` runs, then until its last records are in."""
    while pid_alive(pid):
        try:
            if ingester.run_once(skip_held=True) == 0:
                time.sleep(interval)
        except Exception:
            log.exception("ingest pass failed; retrying")
            time.sleep(1.0)
    # the process is gone: its last console lines (still in the pipes), then what it left
    for thread in relays:
        thread.join(timeout=5)  # a child that outlives it may hold the pipe: bounded
    quiet = 0
    while quiet < 3:
        quiet = quiet + 1 if ingester.run_once() == 0 else 0
        time.sleep(interval)


if __name__ == "__main__":
    raise SystemExit(main())
