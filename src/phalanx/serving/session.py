"""One `phalanx serve` session as a Phalanx experiment of kind "service", so the UI shows how the
endpoint is used: request rate, p50/p99 latency, errors, batch sizes and the model version served,
as scalars over time.

The experiment is made the way a plain script's ``Task.init`` makes one: an ``experiment`` record
(with ``kind: "service"``) first in this process's spool stream, then scalars, then a ``status``
record when the server shuts down, all through the tracking SDK's ``Reporter`` (memory -> spool)
and a detached ingester that follows this process (spool -> store, exactly once). Because it is
recorded like a script (backend "script", one replica with this pid and host, and
``runs/ID/script.pid``), the existing rules apply unchanged: `phalanx stop ID` stops the server, and
a killed server's experiment is marked failed by reconcile (phalanx/reconcile.py) at the next read.

Everything is counted on the event loop (``observe`` and ``observe_batch`` are called by the
endpoint and the batcher, both on the loop), and ``tick`` runs there too: no lock is needed.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from phalanx.ids import new_id
from phalanx.machine.procs import record_process
from phalanx.tracking.client import Reporter
from phalanx.tracking.identity import ENV_HOST, ENV_TOKEN, Identity
from phalanx.tracking.ingesting import spawn_ingester

KIND = "service"
INGEST_INTERVAL = 0.5  # seconds between the ingester's passes while idle: scalars come every few seconds


def _percentile(ordered: list[float], q: float) -> float:
    """The nearest-rank percentile of an ascending list (not empty)."""
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


class ServiceSession:
    """The service experiment of one server. ``open`` creates it; ``run`` reports every
    ``interval`` seconds until cancelled; ``close`` reports the last interval and the end."""

    def __init__(self, reporter: Reporter, interval: float, version: Callable[[], int]) -> None:
        self.reporter = reporter
        self.interval = interval
        self._version = version
        self.requests = 0  # predict requests answered since the start
        self.errors = 0  # of them, answered with a status >= 400
        self._latencies: list[float] = []  # this interval's, in seconds
        self._batches: list[int] = []  # this interval's rows per ONNX Runtime call
        self._since = time.monotonic()
        self._step = 0
        self._closed = False

    @property
    def id(self) -> str:
        return self.reporter.identity.experiment_id

    @classmethod
    def open(
        cls,
        *,
        name: str,
        project: str,
        params: Mapping[str, Any],
        version: Callable[[], int],
        spool_root: Path,
        runs_root: Path,
        interval: float = 5.0,
        start_ingester: bool = True,
    ) -> ServiceSession:
        """Create the experiment (its first record is written to the spool before this returns)
        and start an ingester for it (unless reports go to a server, PHALANX_HOST, or
        ``start_ingester`` is False: then the next `phalanx` read command ingests it)."""
        experiment_id = new_id()
        host = (os.environ.get(ENV_HOST) or "").rstrip("/") or None
        ident = Identity(
            experiment_id=experiment_id,
            replica="master",
            role="master",
            index=0,
            replica_rank=0,
            spool_dir=spool_root / experiment_id,
            host=host,
            token=os.environ.get(ENV_TOKEN) or None,
        )
        reporter = Reporter(ident)
        reporter.event(
            "experiment",
            {
                "name": name,
                "project": project,
                "tags": [],
                "kind": KIND,
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "command": [sys.executable, *sys.argv],
            },
        )
        reporter.event("param", {"section": "Serve", "values": dict(params)})
        reporter.drain()
        with contextlib.suppress(OSError):
            record_process(runs_root / experiment_id / "script.pid")  # where `phalanx stop` looks
        if host is None and start_ingester:
            ingester = _start_ingester(ident.spool_dir)
            reporter.ingester_alive = lambda: ingester.poll() is None
        return cls(reporter, interval, version)

    # --- counting (on the event loop) ---------------------------------------------------------------

    def observe(self, status: int, seconds: float) -> None:
        """One predict request answered with ``status`` after ``seconds``."""
        self.requests += 1
        if status >= 400:
            self.errors += 1
        self._latencies.append(seconds)

    def observe_batch(self, rows: int) -> None:
        self._batches.append(rows)

    # --- reporting ----------------------------------------------------------------------------------

    def tick(self) -> None:
        """Report the interval since the last tick: rate, latency percentiles, batch sizes, and the
        running totals (``requests/count`` is every request since the start)."""
        now = time.monotonic()
        elapsed = max(now - self._since, 1e-9)
        latencies, self._latencies = sorted(self._latencies), []
        batches, self._batches = self._batches, []
        self._since = now
        step = self._step
        self._step += 1
        report = self.reporter.scalars.append
        stamp = time.time()

        def put(title: str, series: str, value: float) -> None:
            report((title, series, step, float(value), stamp, 0))

        put("requests", "count", self.requests)
        put("requests", "per second", len(latencies) / elapsed)
        put("errors", "count", self.errors)
        put("model version", "served", self._version())
        if latencies:
            put("latency ms", "p50", _percentile(latencies, 0.50) * 1000)
            put("latency ms", "p99", _percentile(latencies, 0.99) * 1000)
        if batches:
            put("batch rows", "mean", sum(batches) / len(batches))
            put("batch rows", "max", max(batches))

    async def run(self) -> None:
        """Tick every ``interval`` seconds until cancelled."""
        while True:
            await asyncio.sleep(self.interval)
            self.tick()

    def close(self, status: str = "stopped", reason: str | None = "phalanx serve shut down") -> None:
        """The last interval and the end, written to the spool (the ingester stores them after
        this process exits, or the next `phalanx` read command does)."""
        if self._closed:
            return
        self._closed = True
        self.tick()
        data: dict[str, Any] = {"status": status}
        if reason:
            data["reason"] = reason
        self.reporter.event("status", data)
        self.reporter.close(wait=self.reporter.shipper is not None, timeout=30.0)


def _start_ingester(spool: Path) -> subprocess.Popen[bytes]:
    """A detached `python -m phalanx.ingest` following this process (as Task.init starts one)."""
    return spawn_ingester(spool, ["--interval", str(INGEST_INTERVAL)])
