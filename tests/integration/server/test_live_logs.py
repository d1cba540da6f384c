"""Following a running experiment's console over server-sent events from a real `phalanx server`."""

from __future__ import annotations

import json
import queue
import threading
from pathlib import Path

import httpx
from tests.integration.server.serverproc import start_server, stop_server
from tests.unit.server import fill

from phalanx.config import Settings
from phalanx.domain import ExperimentStatus
from phalanx.store import open_store


def test_the_stream_delivers_lines_as_they_are_stored_then_ends_with_the_experiment(
    phalanx_home: Path,
) -> None:
    store = open_store(Settings(home=phalanx_home))
    e = fill.experiment(store, status=ExperimentStatus.RUNNING)
    fill.log_lines(store, e.id, "worker-0", ["before the client came"])
    server = start_server(phalanx_home)
    events: queue.Queue[tuple[str, str]] = queue.Queue()

    def follow() -> None:
        kind = ""
        with httpx.stream("GET", f"{server.url}/api/v1/experiments/{e.id}/logs/stream", timeout=120) as r:
            for line in r.iter_lines():
                if line.startswith("event: "):
                    kind = line[7:]
                elif line.startswith("data: "):
                    events.put((kind, line[6:]))
                    if kind == "end":
                        return

    reader = threading.Thread(target=follow, daemon=True)
    reader.start()
    try:
        kind, data = events.get(timeout=60)
        assert kind == "line" and json.loads(data)["text"] == "before the client came"
        fill.log_lines(store, e.id, "worker-1", ["live from rank 2"])
        kind, data = events.get(timeout=60)
        assert json.loads(data) | {"time": 0} == {
            "offset": 0,
            "replica": "worker-1",
            "text": "live from rank 2",
            "time": 0,
            "stream": "stdout",
        }
        store.update_experiment(e.id, status=ExperimentStatus.SUCCEEDED)
        assert events.get(timeout=60)[0] == "end"
        reader.join(timeout=30)
        assert not reader.is_alive()
    finally:
        stop_server(server.proc)
        store.close()
