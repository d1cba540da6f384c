"""Ingest: spool files -> store, exactly once.

Each spool file (one per writing process, see ``phalanx.spool``) is read from the byte
offset the store last committed for it; its complete records become events that are written
together with the new offset in one transaction (``IngestStore.ingest_batch``), so a crash of the
writer, of the ingester or of the database at any point neither loses nor repeats a record. Files a
record names (artifacts, models) are copied into the artifact store before that transaction
(an idempotent overwrite) and removed from the spool after it. After each commit an ack file tells
``task.flush()`` that its records are visible.

The server's ingest endpoint uses ``records_to_events`` and ``store_artifact_bytes`` for the same
records arriving over HTTP. ``python -m phalanx.ingest --spool DIR [--follow-pid PID]`` runs it.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import logging
import os
import shutil
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from phalanx.config import Settings
from phalanx.domain import Event, EventKind
from phalanx.errors import UsageError
from phalanx.machine.procs import INGESTER_RECORD, pid_alive, record_process, recorded_process, writer_gone
from phalanx.reconcile import reconcile
from phalanx.spool import (
    ACK_SUFFIX,
    REFUSED_SUFFIX,
    SpoolWriter,
    check_columns,
    read_records,
    spool_files,
    write_ack,
    write_refused,
)
from phalanx.store import open_store
from phalanx.store.artifacts import ArtifactStore, safe_path
from phalanx.store.batch import check_event, check_log, name, scalar_block, text_field
from phalanx.tracking.console import relay, relay_lock_path
from phalanx.tracking.identity import Identity
from phalanx.tracking.labels import MAX_TAG, label_problem
from phalanx.tracking.screen import step_problem, truncate_line

if TYPE_CHECKING:
    from phalanx.store.base import IngestStore
    from phalanx.store.run_store import SpoolSink

log = logging.getLogger(__name__)

_FILE_KINDS = (EventKind.ARTIFACT.value, EventKind.MODEL.value, EventKind.REPRO.value)


def _integer(value: Any, field: str, bits: int = 64) -> int:
    """An integer field of a record, naming the field when it is not one or does not fit the
    column's ``bits`` (a number the database cannot hold would make the stream's every later batch
    fail). A fractional number is refused, not truncated: seq 1.5 read as 1 would be taken for a
    re-sent event and dropped."""
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise UsageError(f"event {field!r} must be an integer, not {value!r}")
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        raise UsageError(f"event {field!r} must be an integer, not {value!r}") from None
    if not -(2 ** (bits - 1)) <= number < 2 ** (bits - 1):
        raise UsageError(f"event {field!r} {number} is out of range (a {bits}-bit integer)")
    return number


def _check_steps(ev: Event) -> None:
    """UsageError naming the point whose step is beyond 64 bits (JSON integers have no bound; the
    SDK's packed form cannot hold one): stored, it would fail the whole batch at every retry, and
    every later record of its stream with it. Anything else malformed is the store's to say."""
    if ev.kind not in (EventKind.SCALAR, EventKind.TEXT) or "keys" in ev.data:
        return
    points = ev.data.get("points") if ev.kind is EventKind.SCALAR else None
    if isinstance(points, list):
        steps = [(f"points[{j}] step", p[2]) for j, p in enumerate(points) if isinstance(p, list) and p[2:]]
    else:
        steps = [("step", ev.data.get("step", ev.data.get("iteration")))]
    for where, value in steps:
        try:
            number = int(value) if isinstance(value, (int, str)) and not isinstance(value, bool) else None
        except ValueError:
            continue  # not a number at all: the store names it
        if number is not None and step_problem(number):
            raise UsageError(f"{where} {number} is out of range (a 64-bit integer)")


def record_to_event(record: Mapping[str, Any]) -> Event:
    """One spool record (or one item of a POSTed ``{"events": [...]}``) as an Event.
    UsageError, naming the field, when it is malformed."""
    if not isinstance(record, Mapping):
        raise UsageError("an event must be a JSON object")
    try:
        kind = EventKind(record["kind"])
    except KeyError:
        raise UsageError("event has no 'kind'") from None
    except ValueError:
        raise UsageError(
            f"unknown event kind {record.get('kind')!r}; one of {', '.join(k.value for k in EventKind)}"
        ) from None
    exp = record.get("experiment_id")
    if exp is None or exp == "":
        raise UsageError("event has no 'experiment_id'")
    if not isinstance(exp, str):
        raise UsageError(f"event 'experiment_id' must be text, not {exp!r}")
    data = record.get("data") or {}
    if not isinstance(data, Mapping):
        raise UsageError("event 'data' must be an object")
    if kind.value in _FILE_KINDS:
        if "name" not in data or "path" not in data:
            raise UsageError(f"{kind.value} event needs 'name' and 'path' in its data")
        data = {k: v for k, v in data.items() if k != "spool_path"}
        data["path"] = safe_path(text_field(data, "path", None))
    if kind is EventKind.EXPERIMENT:
        data = _clean_created(data)
    seq = _integer(record.get("seq", 0), "seq")
    index = _integer(record.get("index", 0) or 0, "index", 32)
    rank = record.get("rank")
    rank = None if rank is None or rank == "" else _integer(rank, "rank", 32)
    try:
        when = float(record.get("time") or time.time())
    except (TypeError, ValueError):
        raise UsageError(
            f"event 'time' must be seconds since the epoch, not {record.get('time')!r}"
        ) from None
    attempt = record.get("attempt")  # absent in records of writers before attempts: None
    attempt = None if attempt is None or attempt == "" else _integer(attempt, "attempt")
    if attempt is not None and not 0 <= attempt < 2**31:
        raise UsageError(f"event attempt {attempt} is out of range (0 to 2147483647; PHALANX_ATTEMPT)")
    event = Event(
        experiment_id=exp,
        kind=kind,
        data=data,
        replica=str(record.get("replica") or "master"),
        role=str(record.get("role") or "master"),
        index=index,
        rank=rank,
        time=when,
        stream=str(record.get("stream") or ""),
        seq=seq,
        attempt=attempt,
    )
    _check_names(event)
    _check_steps(event)
    if kind is EventKind.SCALAR and "keys" in data:
        try:  # columns: check their shape here; decoding them twice would cost more than storing
            check_columns(data)
        except (KeyError, TypeError, ValueError) as exc:
            raise UsageError(f"malformed scalar columns: {exc}") from None
    elif kind is EventKind.LOG:  # its lines are cut and cleaned once, when they are stored
        try:
            check_log(data)
        except (TypeError, ValueError) as exc:
            raise UsageError(f"malformed log lines: {exc}") from None
    else:
        check_event(event)  # malformed data is refused here, never inside a store transaction
    return event


# The envelope's strings land in columns of bounded length (PostgreSQL enforces them, SQLite does
# not) and PostgreSQL cannot store a NUL: a record either store could not hold is refused here.
ENVELOPE_LIMITS = {"stream": 128, "replica": 64, "role": 16}


def _check_names(event: Event) -> None:
    for field, most in ENVELOPE_LIMITS.items():
        value = getattr(event, field)
        if "\x00" in value:
            raise UsageError(f"event {field} {value[:40]!r} contains a NUL character")
        if len(value) > most:
            raise UsageError(f"event {field} {value[:40]!r}... is longer than {most} characters")


def _text(data: dict[str, Any], field: str, most: int) -> None:
    value = data.get(field)
    if value is None:
        return
    if not isinstance(value, str):
        raise UsageError(f"experiment record: {field} must be text, not {type(value).__name__}")
    data[field] = value.replace("\x00", "")[:most]  # what a column can hold (PostgreSQL: no NUL)


def _clean_created(data: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of a plain script's ``experiment`` record that become columns, made storable:
    a wrong type is a 400 here rather than an internal error inside the store (or tags given as
    text stored as a list of characters); text too long for its column is cut, as a script's long
    name must not lose the whole experiment."""
    out = dict(data)
    for field in ("name", "project"):  # refused (400), not cut: tables and logs show them
        value = out.get(field)
        if isinstance(value, str) and (problem := label_problem(value, field)):
            raise UsageError(f"experiment record: {problem}")
    _text(out, "name", 255)
    _text(out, "project", 255)
    _text(out, "framework", 32)
    _text(out, "host", 255)
    tags = out.get("tags")
    if tags is not None:
        if not isinstance(tags, list) or any(not isinstance(t, str) for t in tags):
            raise UsageError("experiment record: tags must be a list of texts")
        for t in tags:
            if problem := label_problem(t, "tag", MAX_TAG):
                raise UsageError(f"experiment record: {problem}")
        out["tags"] = tags[:100]
    pid = out.get("pid")
    if pid is not None and (not isinstance(pid, int) or isinstance(pid, bool) or not 0 <= pid < 2**31):
        raise UsageError(f"experiment record: pid must be a process id (an integer from 0), not {pid!r}")
    return out


def records_to_events(records: Iterable[Mapping[str, Any]]) -> list[Event]:
    """Spool records as Events (UsageError on the first malformed one; nothing is written)."""
    events = []
    for i, rec in enumerate(records):
        try:
            events.append(record_to_event(rec))
        except UsageError as exc:
            raise UsageError(f"events[{i}]: {exc.message}") from None
    return events


def store_artifact_bytes(artifacts: ArtifactStore, experiment_id: str, path: str, data: bytes) -> int:
    """Store a file's bytes at ``path`` inside the experiment's folder (the server's PUT of a file);
    UsageError if the path would leave the folder. Returns the size."""
    return artifacts.put_bytes(experiment_id, safe_path(path), data)


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
    ) -> None:
        self.store = store
        self.claimed = claimed
        self.artifacts = artifacts if artifacts is not None else store.artifact_store
        self.spool = Path(spool)
        self.batch_bytes = batch_bytes
        self.cleanup = cleanup
        self._positions: dict[str, int] = {}  # stream -> committed offset, as far as we know

    def spool_files(self) -> list[Path]:
        return spool_files(self.spool, claimed=self.claimed) if self.spool.is_dir() else []

    def run_once(self) -> int:
        """One pass over every spool file; returns how many new events were stored."""
        total = 0
        for path in self.spool_files():
            try:
                total += self._ingest_file(path)
            except FileNotFoundError:
                continue  # removed meanwhile (experiment deleted)
            except Exception as exc:  # one stream's trouble must not hold up every other stream
                # one line, not a traceback per file and pass: a database outage is expected
                log.warning("%s: ingest failed (%s); will retry", path, _one_line(exc))
                log.debug("ingest failure", exc_info=True)
                self._positions.pop(path.stem, None)
        return total

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
                    n = self.run_once()
                except Exception:  # keep the supervisor's ingester alive through a transient error
                    log.exception("ingest pass failed; retrying")
                    n = 0
                if n == 0:
                    stop.wait(interval)
            self.run_once()

    def _ingest_file(self, path: Path) -> int:
        stream = path.stem
        total = 0
        while True:
            size = path.stat().st_size
            start = self._positions.get(stream)
            if start is None:
                start = self.store.ingest_position(stream)[0]
                self._positions[stream] = start
            if size <= start:
                self._remove_if_finished(path, stream)
                return total
            records, end = read_records(path, start, self.batch_bytes)
            if end == start:  # only a partial record so far (or forever, if its writer was killed)
                self._remove_if_finished(path, stream)
                return total
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
            if n is None:  # another ingester moved the position: reread it
                self._positions[stream] = self.store.ingest_position(stream)[0]
                continue
            self._positions[stream] = end
            total += n
            if last_seq >= 0:
                write_ack(path.parent, stream, last_seq)
            for src, _, _ in files:
                _remove(src)

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
            spool_path = rec.get("data", {}).get("spool_path") if ev.kind.value in _FILE_KINDS else None
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
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")

    settings = Settings()
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


def _follow(ingester: Ingester, pid: int, interval: float, relays: Sequence[threading.Thread]) -> None:
    """Ingest while process ``pid`` runs, then until its last records are in."""
    while pid_alive(pid):
        try:
            if ingester.run_once() == 0:
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
