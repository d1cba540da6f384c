"""The service experiment of a `phalanx serve` session, through the real spool and ingest: its
kind, its scalars per interval (rate, nearest-rank p50/p99, errors, batch rows, version), and the
record the existing reconcile rule judges when the server is killed (its pid on this host)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from phalanx.config import Settings
from phalanx.domain import ExperimentStatus
from phalanx.ends import decide, facts
from phalanx.ingest import Ingester
from phalanx.machine.procs import Seen
from phalanx.serving.session import ServiceSession
from phalanx.store import open_store


def test_a_session_reports_each_interval_and_is_judged_like_a_script(phalanx_home: Path) -> None:
    settings = Settings()
    version = [3]
    session = ServiceSession.open(
        name="serve digits@prod",
        project="vision",
        params={"model": "digits"},
        version=lambda: version[0],
        spool_root=settings.spool_dir,
        runs_root=settings.runs_dir,
        start_ingester=False,
    )
    for ms in range(1, 101):  # 100 requests, 1..100 ms; the last 4 refused
        session.observe(422 if ms > 96 else 200, ms / 1000)
    for rows in (1, 3, 8):
        session.observe_batch(rows)
    session.tick()
    version[0] = 4  # the alias moved
    session.observe(200, 0.002)
    session.tick()
    session.reporter.drain()

    store = open_store(settings)
    Ingester(store, store.artifact_store, settings.spool_dir).run_once()
    exp = store.get_experiment(session.id)
    assert (exp.kind, exp.name, exp.project, exp.status) == (
        "service",
        "serve digits@prod",
        "vision",
        ExperimentStatus.RUNNING,
    )

    def series(title: str) -> dict[str, list[float]]:
        return {k: list(v.values) for k, v in store.last_points(exp.id, title, 10).items()}

    requests = series("requests")
    assert requests["count"] == [100, 101] and len(requests["per second"]) == 2
    assert series("errors") == {"count": [4, 4]}
    assert series("latency ms") == {"p50": [50, 2], "p99": [99, 2]}
    assert series("batch rows") == {"mean": [4], "max": [8]}  # no batch ran in the second interval
    assert series("model version") == {"served": [3, 4]}

    # the server runs here: reconcile leaves it; killed, the script rule marks it failed
    seen = facts(store, settings, exp)
    assert (seen.script, seen.recorder, seen.recorder_pid) == (True, Seen.RUNS, os.getpid())
    assert decide(seen) is None
    assert store.list_replicas(exp.id)[0].host == socket.gethostname()

    session.close()
    Ingester(store, store.artifact_store, settings.spool_dir).run_once()
    assert store.get_experiment(exp.id).status is ExperimentStatus.STOPPED
    store.close()
