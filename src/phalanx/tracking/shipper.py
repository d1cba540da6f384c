"""Remote mode: ship this process's spool records to a Phalanx server (PHALANX_HOST).

The spool file stays the write-ahead log: a batch leaves it only when the server has answered, and a
batch the server did not answer is sent again (with backoff) while the server is down; the server
stores each (stream, seq) once, so a re-sent batch is harmless. Files named by ARTIFACT/MODEL
records are PUT before the record that names them. Standard library only (urllib).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import shutil
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from phalanx.machine.procs import writer_gone
from phalanx.spool import (
    ACK_SUFFIX,
    REFUSED_SUFFIX,
    SHIPPED_SUFFIX,
    SUFFIX,
    SpoolWriter,
    _records_in,
    read_records,
    read_shipped,
    shipped_path,
    write_shipped,
)

log = logging.getLogger("phalanx.tracking")

BATCH_BYTES = 4 << 20
# One record larger than this is refused here: a server's default limit is 16 MiB, and a body over
# the limit is answered 413 before it is read, which the client sees as a broken connection and would
# retry for ever (texts are truncated to 1 Mi characters, so only an odd record gets here).
MAX_RECORD_BYTES = 15 << 20
DOWN_GRACE = 5.0  # seconds a flush() waits for a server that does not answer before returning False
# A replica may report before its supervisor has recorded the experiment (the store is opened after
# the replicas start): for this long after the shipper starts, "no such experiment" (404) is retried
# like an outage; after it, the server's refusal is final and flush() says so.
UNKNOWN_GRACE = 60.0
TIMEOUT = 30.0


class NotYetKnown(Exception):
    """The server does not know the experiment yet (404 within ``UNKNOWN_GRACE``): retried."""


class RejectedError(Exception):
    """The server refused a batch for good (4xx other than 408/429): re-sending cannot help."""

    def __init__(self, code: int, detail: str) -> None:
        super().__init__(f"{code} {detail}")
        self.code, self.detail = code, detail


def _why(exc: RejectedError) -> str:
    try:
        detail = json.loads(exc.detail).get("message") or exc.detail
    except (ValueError, AttributeError):
        detail = exc.detail
    return f"the server refused it ({exc.code}): {detail}"


class SpoolFile:
    """A spool file left by a process that has exited: what the shipper needs of a SpoolWriter."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.spool_dir = path.parent
        self.stream = path.name[: -len(SUFFIX)]
        self.last_seq = _records_in(path) - 1


class Shipper:
    """Ships one spool file (the live writer's, or a leftover ``SpoolFile``). Progress is kept in
    ``<stream>.shipped`` ("OFFSET SEQ"), so a file whose writer died before the server came back is
    shipped later from where it stopped (``ship_leftovers``), by whichever process gets to it."""

    def __init__(
        self, writer: SpoolWriter | SpoolFile, host: str, token: str | None, *, interval: float = 0.2,
        thread: bool = True,
    ) -> None:  # fmt: skip
        self.writer = writer
        self.host = host.rstrip("/")
        self.token = token
        self.interval = interval
        self.offset, self.shipped = read_shipped(writer.spool_dir, writer.stream)
        if self.shipped < 0 and not shipped_path(writer.spool_dir, writer.stream).exists():
            # the stream is the server's from its first record: this machine's store never takes it
            write_shipped(writer.spool_dir, writer.stream, 0, -1)
        self._refusals: list[str] = []  # why records were refused for good, since take_refusals()
        self.down_since: float | None = None  # when the server stopped answering (None: it answers)
        self.waiting_why: str | None = None  # why records wait (the server away, or not knowing them yet)
        self.started = time.monotonic()
        self._cond = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="phalanx-shipper", daemon=True)
        if thread:
            self._thread.start()

    # --- public ----------------------------------------------------------------------------------

    def wait(self, seq: int, timeout: float) -> bool:
        """Wait until the server has stored records up to ``seq``."""
        start = time.monotonic()
        deadline = start + timeout
        with self._cond:
            self._cond.notify_all()
            while self.shipped < seq:
                now = time.monotonic()
                left = deadline - now
                if left <= 0:
                    return False
                down = self.down_since
                if down is not None and now - max(down, start) > DOWN_GRACE:
                    # the server is away: the records are safe in the spool and go when it is back
                    # (this process, a later one, or `phalanx sync`); do not hold training up
                    return False
                self._cond.wait(min(left, 0.05))
        return True

    def take_refusals(self) -> list[str]:
        """Reasons the server gave for records it refused for good (since the last call)."""
        with self._cond:
            out, self._refusals = self._refusals, []
        return out

    def _refused(self, what: str, exc: RejectedError) -> None:
        why = f"{what}: {_why(exc)}"
        log.error("phalanx: %s", why)
        with self._cond:
            if len(self._refusals) < 20:
                self._refusals.append(why)

    def stop(self, timeout: float = 10.0) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._thread.join(timeout)

    # --- the thread ------------------------------------------------------------------------------

    def _run(self) -> None:
        backoff = 0.5
        while True:
            with self._cond:
                if self._stop and self.shipped >= self.writer.last_seq:
                    return
                self._cond.wait(self.interval)
            try:
                while self.ship_once():
                    pass
                backoff = 0.5
                self.down_since = None
                self.waiting_why = None
            except Exception as exc:  # the server is down or slow: keep the spool, try again later
                if self.down_since is None:
                    self.down_since = time.monotonic()
                self.waiting_why = (
                    str(exc) if isinstance(exc, NotYetKnown) else f"cannot reach {self.host}: {exc}"
                )
                if self._stop:
                    log.warning(
                        "phalanx: cannot reach %s (%s); what was not shipped stays in %s and is shipped "
                        "by the next process here or `phalanx sync`", self.host, exc, self.writer.path,
                    )  # fmt: skip
                    return  # exiting and the server is away: the spool keeps the records
                log.warning("phalanx: cannot reach %s (%s); retrying in %.1fs", self.host, exc, backoff)
                with self._cond:
                    self._cond.wait(backoff)  # a flush() waiting for us wakes us sooner
                backoff = min(backoff * 2, 30.0)

    def ship_once(self) -> int:
        """Send the next batch of complete records; returns how many were sent."""
        records, end = read_records(self.writer.path, self.offset, BATCH_BYTES)
        if end == self.offset:
            return 0
        pending: list[dict[str, Any]] = []
        uploaded: list[Path] = []
        for rec in records:
            if rec is None:
                continue
            spool_path = (rec.get("data") or {}).get("spool_path")
            if spool_path:
                self._post(pending)  # the experiment must exist before its files arrive
                pending = []
                source = self.writer.spool_dir / spool_path
                try:
                    self._upload(rec["experiment_id"], rec["data"]["path"], source)
                except RejectedError as exc:
                    self._refused(f"file {rec['data']['path']}", exc)
                except FileNotFoundError:  # an ingester of this machine's spool stored it already
                    log.debug("phalanx: %s was taken by a local ingester", source)
                uploaded.append(source)
                rec["data"] = {k: v for k, v in rec["data"].items() if k != "spool_path"}
            pending.append(rec)
        self._post(pending)
        last = max((int(r["seq"]) for r in records if r is not None), default=self.shipped)
        with self._cond:
            self.offset = end
            self.shipped = max(self.shipped, last)
            self._cond.notify_all()
        with contextlib.suppress(OSError):  # a full disk: progress is re-learned from the server's dedup
            write_shipped(self.writer.spool_dir, self.writer.stream, end, self.shipped)
        for path in uploaded:
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
        return len(records)

    def _post(self, records: list[dict[str, Any]]) -> None:
        """Send records; when the server refuses the batch for good, split it so only the records it
        refuses are left out (one bad record must not take the good ones with it)."""
        if not records:
            return
        body = json.dumps({"events": records}, default=str).encode()
        if len(records) == 1 and len(body) > MAX_RECORD_BYTES:  # a server would answer 413 mid-upload
            self._refused(
                f"record {records[0].get('seq')}",
                RejectedError(413, f"a {len(body)}-byte record is larger than {MAX_RECORD_BYTES} bytes"),
            )
            return
        try:
            self._request("POST", f"{self.host}/api/v1/ingest", body, "application/json")
        except RejectedError as exc:
            if len(records) == 1 or exc.code in (401, 403, 404):  # unknown experiment, no token: all
                first, last = records[0].get("seq"), records[-1].get("seq")
                span = f"record {first}" if len(records) == 1 else f"records {first}-{last}"
                self._refused(span, exc)
                return
            half = len(records) // 2
            self._post(records[:half])
            self._post(records[half:])

    def _upload(self, experiment_id: str, path: str, source: Path) -> None:
        files = sorted(p for p in source.rglob("*") if p.is_file()) if source.is_dir() else [source]
        for f in files:
            rel = path if f == source else f"{path}/{f.relative_to(source).as_posix()}"
            url = (
                f"{self.host}/api/v1/experiments/{urllib.parse.quote(experiment_id)}/files/"
                f"{urllib.parse.quote(rel)}"
            )
            self._request("PUT", url, f.read_bytes(), "application/octet-stream")

    def _request(self, method: str, url: str, body: bytes, content_type: str) -> None:
        headers = {"Content-Type": content_type}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        req = urllib.request.Request(url, data=body, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=TIMEOUT) as resp:
                resp.read()
        except urllib.error.HTTPError as exc:
            if exc.code == 404 and time.monotonic() - self.started < UNKNOWN_GRACE:
                detail = exc.read()[:500].decode(errors="replace")
                raise NotYetKnown(
                    f"{_why(RejectedError(404, detail))} (retried for {UNKNOWN_GRACE:.0f} s)"
                ) from None
            if 400 <= exc.code < 500 and exc.code not in (408, 429):
                # re-sending cannot help; do not stall every later report behind it
                raise RejectedError(exc.code, exc.read()[:500].decode(errors="replace")) from None
            raise


def ship_leftovers(
    spool_root: Path, host: str, token: str | None, *, skip: str | None = None, timeout: float = 60.0
) -> tuple[int, int, list[str]]:
    """Ship what spool files of exited processes under ``spool_root`` (``<home>/spool``, or one
    experiment's folder) hold and the server has not answered for; a file shipped whole is removed.
    Returns (records shipped, files finished, problems). The server stores each (stream, seq) once,
    so two processes shipping the same leftover at once store nothing twice. Stops (leaving the
    rest for later) at the first batch the server cannot be reached for, or after ``timeout``."""
    files = sorted([*spool_root.glob(f"*{SUFFIX}"), *spool_root.glob(f"*/*{SUFFIX}")])
    deadline = time.monotonic() + timeout
    shipped = finished = 0
    problems: list[str] = []
    for path in files:
        stream = path.name[: -len(SUFFIX)]
        if stream == skip or not writer_gone(stream) or time.monotonic() > deadline:
            continue
        with open(path, "rb") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # another process ships it now
            except OSError:
                continue
            shipper = Shipper(SpoolFile(path), host, token, thread=False)
            try:
                while time.monotonic() < deadline:
                    n = shipper.ship_once()
                    if n == 0:
                        break
                    shipped += n
            except Exception as exc:  # the server is away again: the rest waits for the next try
                problems.append(f"{path.name}: {exc}")
                continue
            problems.extend(shipper.take_refusals())
            if shipper.offset >= path.stat().st_size:
                for leftover in (SUFFIX, ACK_SUFFIX, REFUSED_SUFFIX, SHIPPED_SUFFIX):
                    path.with_name(stream + leftover).unlink(missing_ok=True)
                finished += 1
    return shipped, finished, problems


def ship_leftovers_in_background(spool_root: Path, host: str, token: str | None, skip: str) -> None:
    """What a new reporting process does: ship what earlier processes of this host left, in a
    daemon thread (the server may be slow; training must not wait)."""

    def run() -> None:
        try:
            n, _, _ = ship_leftovers(spool_root, host, token, skip=skip)
            if n:
                log.info("phalanx: shipped %d records left by earlier processes", n)
        except Exception:
            log.debug("shipping leftovers failed", exc_info=True)

    threading.Thread(target=run, name="phalanx-leftovers", daemon=True).start()
