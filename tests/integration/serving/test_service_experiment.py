"""A `phalanx serve` session is a Phalanx experiment of kind "service": its requests, errors,
latency, batch sizes and served version arrive as scalars while it runs, through the spool and the
ingester (exactly once), and the experiment ends when the server stops."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

from tests.integration.serving.serveproc import post, start_serve, stop_serve
from tests.support.onnx_models import random_linear, record_model

from phalanx.cli.listing import open_for_reading
from phalanx.config import Settings
from phalanx.domain import ExperimentFilter, ExperimentStatus
from phalanx.registry.checker import check_in_process
from phalanx.registry.service import Registry
from phalanx.store import open_store

WAIT_SECONDS = 120  # the ingester's passes on a loaded 2-core machine


def _service(store: Any) -> Any:
    found = [e for e in store.list_experiments(ExperimentFilter(limit=100)).items if e.kind == "service"]
    return found[0] if found else None


def _last(store: Any, experiment_id: str, title: str, series: str) -> float | None:
    points = store.last_points(experiment_id, title, 1).get(series)
    return points.values[-1] if points is not None and points.values else None


def test_a_serve_session_counts_its_requests_into_a_service_experiment(phalanx_home: Path) -> None:
    store = open_store(Settings())
    exp = store.create_experiment(name="train", project="vision").id
    record_model(store, exp, "digits", random_linear(1))
    Registry(store, check_in_process).register(exp, "digits")
    store.close()

    served = start_serve(phalanx_home, "digits@1", "--track-seconds", "0.2")
    ok, bad = 7, 2
    try:
        row = json.dumps({"inputs": np.full((1, 64), 0.5).tolist()}).encode()
        for _ in range(ok):
            assert post(served, "/v1/models/digits:predict", row)[0] == 200
        for _ in range(bad):
            assert post(served, "/v1/models/digits:predict", b'{"inputs": [[1, 2]]}')[0] == 422
        # while it runs: the counts reach the store through the ingester the server started
        deadline = time.monotonic() + WAIT_SECONDS
        live = None
        while time.monotonic() < deadline:
            reader = open_store(Settings())
            try:
                service = _service(reader)
                if service is not None:
                    live = _last(reader, service.id, "requests", "count")
                    if live == ok + bad:
                        break
            finally:
                reader.close()
            time.sleep(0.2)
        assert live == ok + bad, f"the service experiment showed {live} requests, not {ok + bad}"
        assert service.status is ExperimentStatus.RUNNING
    finally:
        stop_serve(served.proc)

    store, _ = open_for_reading()  # one ingest pass: what the last interval and the end wrote
    try:
        service = store.get_experiment(service.id)
        assert (service.kind, service.project, service.name) == ("service", "vision", "serve digits@1")
        assert service.status is ExperimentStatus.STOPPED and service.finished_at is not None
        assert service.to_json()["kind"] == "service"
        assert _last(store, service.id, "requests", "count") == ok + bad
        assert _last(store, service.id, "errors", "count") == bad
        assert _last(store, service.id, "model version", "served") == 1
        p50 = store.last_points(service.id, "latency ms", 1000)["p50"].values
        assert p50 and all(v > 0 for v in p50)
        rows = store.last_points(service.id, "batch rows", 1000)["max"].values
        assert rows and max(rows) == 1  # one row a request, one request at a time
        params = {f"{p.section}/{p.key}": p.value for p in store.params(service.id)}
        assert params["Serve/model"] == "digits" and params["Serve/version_at_start"] == 1
    finally:
        store.close()
