"""Remote mode: ship this process's spool records to a Phalanx server (PHALANX_HOST).

The spool file stays the write-ahead log: a batch leaves it only when the server has answered, and a
batch the server did not answer is sent again (with backoff) while the server is down; the server
stores each (stream, seq) once, so a re-sent batch is harmless. Files named by ARTIFACT/MODEL
records are PUT before the record that names them. Standard library only (urllib).
"""

from __future__ import annotations

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

from phalanx.tracking.spool import SpoolWriter, read_records

log = logging.getLogger("phalanx.tracking")

BATCH_BYTES = 4 << 20
TIMEOUT = 30.0


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


class Shipper:
    def __init__(self, writer: SpoolWriter, host: str, token: str | None, *, interval: float = 0.2) -> None:
        self.writer = writer
        self.host = host.rstrip("/")
        self.token = token
        self.interval = interval
        self.offset = 0
        self.shipped = -1  # last seq the server has answered for
        self._refusals: list[str] = []  # why records were refused for good, since take_refusals()
        self._cond = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="phalanx-shipper", daemon=True)
        self._thread.start()

    # --- public ----------------------------------------------------------------------------------

    def wait(self, seq: int, timeout: float) -> bool:
        """Wait until the server has stored records up to ``seq``."""
        deadline = time.monotonic() + timeout
        with self._cond:
            self._cond.notify_all()
            while self.shipped < seq:
                left = deadline - time.monotonic()
                if left <= 0:
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
            except Exception as exc:  # the server is down or slow: keep the spool, try again later
                log.warning("phalanx: cannot reach %s (%s); retrying in %.1fs", self.host, exc, backoff)
                with self._cond:
                    self._cond.wait(backoff)  # a flush() waiting for us wakes us sooner
                backoff = min(backoff * 2, 30.0)
                if self._stop and backoff >= 30.0:
                    return  # exiting and the server stays away: the spool keeps the records

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
                uploaded.append(source)
                rec["data"] = {k: v for k, v in rec["data"].items() if k != "spool_path"}
            pending.append(rec)
        self._post(pending)
        last = max((int(r["seq"]) for r in records if r is not None), default=self.shipped)
        with self._cond:
            self.offset = end
            self.shipped = max(self.shipped, last)
            self._cond.notify_all()
        for path in uploaded:
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
        return len(records)

    def _post(self, records: list[dict[str, Any]]) -> None:
        """Send records; when the server refuses the batch for good, split it so only the records it
        refuses are left out (one bad record must not take the good ones with it)."""
        if not records:
            return
        body = json.dumps({"events": records}, default=str).encode()
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
            if 400 <= exc.code < 500 and exc.code not in (408, 429):
                # re-sending cannot help; do not stall every later report behind it
                raise RejectedError(exc.code, exc.read()[:500].decode(errors="replace")) from None
            raise
