"""Serving a registered model: `phalanx serve` against ONNX Runtime called in-process, in one run.

    .venv/bin/python bench/serve.py [--requests 400] [--clients 16] [--hidden 128] [--rounds 3] [--json FILE]

A temp PHALANX_HOME holds one registered model: the digits MLP's shape (64 -> hidden -> 10, ReLU;
random weights: latency does not depend on them), built with onnx's helpers and recorded as
save_model records it, then registered (its parity check included) and aliased @prod.

Measured, each request one row of 64 float32 as JSON (the common client), latencies per request:

1. in-process ONNX Runtime: ``session.run`` on one row, one caller, then ``--clients`` threads
   (the physical limit of this machine: no HTTP, no JSON);
2. `phalanx serve --no-batching`: one client, then ``--clients`` concurrent clients;
3. `phalanx serve` with dynamic batching, --max-wait-ms 0 (a batch is what queued while the worker
   was busy) and 2 (a batch also waits up to 2 ms for more): the same two loads.

Clients are threads with a keep-alive connection each. `mlflow models serve` is not measured: MLflow
is not installed here, and its pyfunc server builds a per-model Python environment (network) that
this machine cannot fetch; installing MLflow into the shared environment was out of scope.
The figures belong to the machine that measured them (printed with its core count and load).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

PHALANX = Path(sys.executable).parent / "phalanx"


def mlp_onnx(hidden: int) -> bytes:
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.normal(size=(64, hidden)).astype(np.float32) / 8, "W1"),
        numpy_helper.from_array(np.zeros(hidden, np.float32), "B1"),
        numpy_helper.from_array(rng.normal(size=(hidden, 10)).astype(np.float32) / 8, "W2"),
        numpy_helper.from_array(np.zeros(10, np.float32), "B2"),
    ]
    nodes = [
        helper.make_node("MatMul", ["input", "W1"], ["h0"]),
        helper.make_node("Add", ["h0", "B1"], ["h1"]),
        helper.make_node("Relu", ["h1"], ["h2"]),
        helper.make_node("MatMul", ["h2", "W2"], ["o0"]),
        helper.make_node("Add", ["o0", "B2"], ["output"]),
    ]
    graph = helper.make_graph(
        nodes,
        "digits-mlp",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 64])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", 10])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return bytes(model.SerializeToString())


def register(home: Path, data: bytes) -> None:
    import hashlib

    import numpy as np
    import onnxruntime as ort

    from phalanx.config import Settings
    from phalanx.domain import Event, EventKind
    from phalanx.registry.service import Registry
    from phalanx.store import open_store
    from phalanx.tracking.models import _parity_arrays

    store: Any = open_store(Settings(home=home))
    exp = store.create_experiment(name="digits", project="bench").id
    store.artifact_store.put_bytes(exp, "models/digits.onnx", data)
    x = np.ones((2, 64), np.float32)
    y = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
    meta = {
        "model": "digits",
        "check": {"passed": True, "max_abs_diff": 0.0, "rtol": 1e-3, "atol": 1e-5},
        "sha256": hashlib.sha256(data).hexdigest(),
        **_parity_arrays(["input"], [x], ["output"], [y]),
    }
    record = {
        "name": "digits.onnx",
        "format": "onnx",
        "path": "models/digits.onnx",
        "size": len(data),
        "metadata": meta,
    }
    store.write_events([Event(exp, EventKind.MODEL, record)])
    registry = Registry(store)
    registry.register(exp, "digits")
    registry.set_alias("digits", "prod", 1)
    store.close()


def start(home: Path, *args: str) -> tuple[subprocess.Popen[str], str]:
    env = {**os.environ, "PHALANX_HOME": str(home)}
    proc = subprocess.Popen(
        [str(PHALANX), "serve", "digits@prod", "--port", "0", "--no-auth", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("serving "):
            return proc, line.rsplit(" at ", 1)[1].strip()
    raise RuntimeError(f"phalanx serve exited with {proc.wait()}")


def stop(proc: subprocess.Popen[str]) -> None:
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def drive(call_factory: Callable[[], Callable[[], None]], clients: int, requests: int) -> dict[str, float]:
    """``clients`` threads, each making ``requests // clients`` calls of its own ``call``."""
    latencies: list[float] = []
    lock = threading.Lock()
    per_client = max(1, requests // clients)
    barrier = threading.Barrier(clients + 1)

    def worker() -> None:
        call = call_factory()
        call()  # warm: connection and first run
        barrier.wait()
        mine = []
        for _ in range(per_client):
            t0 = time.perf_counter()
            call()
            mine.append(time.perf_counter() - t0)
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=worker) for _ in range(clients)]
    for t in threads:
        t.start()
    barrier.wait()
    started = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    latencies.sort()
    return {
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000,
        "throughput_rps": len(latencies) / elapsed,
        "requests": len(latencies),
    }


def http_call(url: str) -> Callable[[], Callable[[], None]]:
    parts = urlsplit(url)
    body = json.dumps({"inputs": [[0.5] * 64]}).encode()

    def factory() -> Callable[[], None]:
        conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=60)

        def call() -> None:
            conn.request("POST", "/v1/models/digits:predict", body, {"Content-Type": "application/json"})
            response = conn.getresponse()
            payload = response.read()
            if response.status != 200:
                raise RuntimeError(f"{response.status}: {payload[:200]!r}")

        return call

    return factory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=400, help="requests per measurement")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved repeats (medians are reported)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, to check the bench runs")
    args = parser.parse_args()
    if args.smoke:
        args.requests, args.clients, args.rounds, args.hidden = 8, 2, 1, 8

    import numpy as np
    import onnxruntime as ort

    data = mlp_onnx(args.hidden)
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    row = {"input": np.full((1, 64), 0.5, np.float32)}

    def in_process() -> Callable[[], None]:
        return lambda: session.run(None, row) and None

    configs = {
        "batching off": ["--no-batching"],
        "batching, wait 0": ["--max-wait-ms", "0"],
        "batching, wait 2 ms": ["--max-wait-ms", "2"],
    }
    rounds: dict[str, list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="phalanx-bench-serve-") as tmp:
        home = Path(tmp)
        register(home, data)
        servers = {label: start(home, *extra) for label, extra in configs.items()}
        try:
            # rounds interleave every configuration, so a change in the machine's load during the run
            # touches them alike; each figure is the median over the rounds
            for _ in range(args.rounds):
                for clients in (1, args.clients):
                    name = f"onnxruntime in-process, {clients} {'caller' if clients == 1 else 'threads'}"
                    rounds.setdefault(name, []).append(drive(in_process, clients, args.requests))
                    for label, (_, url) in servers.items():
                        name = f"phalanx serve ({label}), {clients} client{'s' if clients > 1 else ''}"
                        rounds.setdefault(name, []).append(drive(http_call(url), clients, args.requests))
        finally:
            for proc, _ in servers.values():
                stop(proc)
    results = {
        name: {key: statistics.median(r[key] for r in runs) for key in runs[0]}
        for name, runs in rounds.items()
    }
    load = os.getloadavg()
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"load average {load[0]:.1f} (1 min); model 64->{args.hidden}->10, 1 row per request (JSON)"
    )
    print(f"{'':48} {'p50 ms':>8} {'p99 ms':>8} {'req/s':>8}")
    for name, r in results.items():
        print(f"{name:48} {r['p50_ms']:8.2f} {r['p99_ms']:8.2f} {r['throughput_rps']:8.0f}")
    if args.json:
        args.json.write_text(
            json.dumps({"results": results, "cores": os.cpu_count(), "load": load}, indent=2)
        )


if __name__ == "__main__":
    main()
