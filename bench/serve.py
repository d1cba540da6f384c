"""Serving a registered model: `phalanx serve` against ONNX Runtime called in-process, in one run.

    .venv/bin/python bench/serve.py [--requests 400] [--clients 16] [--hidden 128] [--rounds 3] [--json FILE]
                                    [--skip-mlflow]

A temp PHALANX_HOME holds one registered model: the digits MLP's shape (64 -> hidden -> 10, ReLU;
random weights: latency does not depend on them), built with onnx's helpers and recorded as
save_model records it, then registered (its parity check included) and aliased @prod.

Measured, each request one row of 64 float32 as JSON (the common client), latencies per request:

1. in-process ONNX Runtime: ``session.run`` on one row, one caller, then ``--clients`` threads
   (the physical limit of this machine: no HTTP, no JSON);
2. `phalanx serve --no-batching`: one client, then ``--clients`` concurrent clients;
3. `phalanx serve` with dynamic batching, --max-wait-ms 0 (a batch is what queued while the worker
   was busy) and 2 (a batch also waits up to 2 ms for more): the same two loads;
4. `mlflow models serve --env-manager local --workers 1` on the same ONNX file (saved with
   ``mlflow.onnx.save_model`` and a float32 signature), ``POST /invocations`` with the same JSON
   body: the same two loads. MLflow lives in the bench's own venv (bench/tracking.py's
   ``mlflow_python``, with onnx and onnxruntime added), never in the project's; ``--skip-mlflow``
   leaves it out, and so does ``--smoke``.

Clients are threads with a keep-alive connection each. Both servers are one process: `phalanx serve`
runs one uvicorn worker, and MLflow is given ``--workers 1`` (its default is one per core).
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
sys.path.insert(0, str(REPO / "bench"))

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
    """SIGTERM (SIGKILL after 30 s); then wait (bounded) for the ingester of the server's service
    experiment, which finishes its last passes once the server is gone."""
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    wanted = f"--follow-pid\0{proc.pid}\0".encode()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        following = False
        for entry in Path("/proc").iterdir():
            try:
                following = following or wanted in (entry / "cmdline").read_bytes()
            except OSError:
                continue
        if not following:
            return
        time.sleep(0.2)


MLFLOW_SAVE = """
import sys
import numpy as np
import onnx
import mlflow.onnx
from mlflow.models import infer_signature

model = onnx.load_model_from_string(open(sys.argv[1], "rb").read())
signature = infer_signature(np.zeros((1, 64), np.float32), np.zeros((1, 10), np.float32))
mlflow.onnx.save_model(model, sys.argv[2], signature=signature)
"""


def mlflow_python() -> Path:
    """MLflow's bench venv (bench/tracking.py makes it), with the ONNX flavor's packages."""
    from tracking import mlflow_python as tracking_mlflow_python

    python = tracking_mlflow_python()
    probe = subprocess.run([str(python), "-c", "import onnx, onnxruntime"], capture_output=True)
    if probe.returncode != 0:
        pins = [
            line.strip()
            for line in (REPO / "requirements.lock").read_text().splitlines()
            if line.lower().startswith(("onnx==", "onnxruntime=="))
        ]
        print(f"installing {' '.join(pins)} into {python.parent.parent} (once)...", file=sys.stderr)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *pins], check=True)
    return python


def start_mlflow(work: Path, data: bytes) -> tuple[subprocess.Popen[str], str]:
    """`mlflow models serve` on the same ONNX model, on a port it was told (MLflow binds it)."""
    import socket

    python = mlflow_python()
    (work / "model.onnx").write_bytes(data)
    (work / "mlflow_save.py").write_text(MLFLOW_SAVE)
    subprocess.run(
        [str(python), str(work / "mlflow_save.py"), str(work / "model.onnx"), str(work / "mlflow-model")],
        check=True,
        capture_output=True,
    )
    with socket.socket() as probe:  # a bench, not a test: a port MLflow's uvicorn then binds
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    mlflow = python.parent / "mlflow"
    argv = [str(mlflow), "models", "serve", "-m", str(work / "mlflow-model"), "--env-manager", "local"]
    argv += ["-h", "127.0.0.1", "-p", str(port), "--workers", "1"]
    # MLflow runs `uvicorn` by name: its venv's bin first on PATH
    env = {**os.environ, "PATH": f"{python.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.Popen(
        argv,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(work / "mlflow.log", "w"),  # noqa: SIM115 (lives as long as the server)
        text=True,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"mlflow models serve exited: {(work / 'mlflow.log').read_text()[-2000:]}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/ping")
            if conn.getresponse().status == 200:
                return proc, url
        except OSError:
            pass
        time.sleep(0.5)
    stop(proc)
    raise RuntimeError("mlflow models serve did not answer /ping in 180 s")


def group_cpu_seconds(pgid: int | None) -> float:
    """CPU time (user + system) of the processes of group ``pgid`` (a server and its children):
    a figure the machine's load does not change the way it changes wall time."""
    if pgid is None:
        return float(sum(os.times()[:2]))  # this process (in-process ONNX Runtime)
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def drive(
    call_factory: Callable[[], Callable[[], None]], clients: int, requests: int, pgid: int | None = None
) -> dict[str, float]:
    """``clients`` threads, each making ``requests // clients`` calls of its own ``call``; with the
    CPU time the server (process group ``pgid``) spent per request."""
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
    cpu = group_cpu_seconds(pgid)
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    cpu = group_cpu_seconds(pgid) - cpu
    latencies.sort()
    return {
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000,
        "throughput_rps": len(latencies) / elapsed,
        "server_cpu_ms": cpu / len(latencies) * 1000,
        "requests": len(latencies),
    }


def http_call(url: str, path: str = "/v1/models/digits:predict") -> Callable[[], Callable[[], None]]:
    parts = urlsplit(url)
    body = json.dumps({"inputs": [[0.5] * 64]}).encode()

    def factory() -> Callable[[], None]:
        conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=60)

        def call() -> None:
            conn.request("POST", path, body, {"Content-Type": "application/json"})
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
    parser.add_argument("--skip-mlflow", action="store_true", help="leave `mlflow models serve` out")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, to check the bench runs")
    args = parser.parse_args()
    if args.smoke:  # MLflow needs its own venv, built on first use: not in a smoke run
        args.requests, args.clients, args.rounds, args.hidden = 8, 2, 1, 8
        args.skip_mlflow = True

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
        mlflow: tuple[subprocess.Popen[str], str] | None = None
        try:
            if not args.skip_mlflow:
                mlflow = start_mlflow(home, data)
            # rounds interleave every configuration, so a change in the machine's load during the run
            # touches them alike; each figure is the median over the rounds
            for _ in range(args.rounds):
                for clients in (1, args.clients):
                    name = f"onnxruntime in-process, {clients} {'caller' if clients == 1 else 'threads'}"
                    rounds.setdefault(name, []).append(drive(in_process, clients, args.requests))
                    for label, (proc, url) in servers.items():
                        name = f"phalanx serve ({label}), {clients} client{'s' if clients > 1 else ''}"
                        figures = drive(http_call(url), clients, args.requests, proc.pid)
                        rounds.setdefault(name, []).append(figures)
                    if mlflow is not None:
                        name = f"mlflow models serve, {clients} client{'s' if clients > 1 else ''}"
                        call = http_call(mlflow[1], "/invocations")
                        rounds.setdefault(name, []).append(drive(call, clients, args.requests, mlflow[0].pid))
        finally:
            for proc, _ in [*servers.values(), *([mlflow] if mlflow else [])]:
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
    print(f"{'':48} {'p50 ms':>8} {'p99 ms':>8} {'req/s':>8} {'cpu ms/req':>10}  (the server's CPU)")
    for name, r in results.items():
        cpu = r["server_cpu_ms"]
        print(f"{name:48} {r['p50_ms']:8.2f} {r['p99_ms']:8.2f} {r['throughput_rps']:8.0f} {cpu:10.3f}")
    if args.json:
        args.json.write_text(
            json.dumps({"results": results, "cores": os.cpu_count(), "load": load}, indent=2)
        )


if __name__ == "__main__":
    main()
