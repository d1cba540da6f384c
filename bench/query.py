"""How long ``phalanx.search_experiments`` takes over 1,000 experiments, and MLflow's ``search_runs``
over the same runs.

    .venv/bin/python bench/query.py [--experiments 1000] [--repeats 30] [--skip-mlflow] [--json FILE]

Each experiment has hyperparameters ``lr`` and ``optimizer`` and a ``val/acc`` series of 20 steps
from two ranks (master and worker-0), written through the Store protocol as ingest writes them. Timed
per query (p50 and p95 of ``--repeats`` calls on an open store, the call a notebook repeats):

- ``metric``: ``metric:last:val/acc >= 0.5`` with two columns;
- ``metric+param``: ``metric:last:val/acc >= 0.5 and param:optimizer = adam``, the query MLflow can
  run too (its params are text: ``=`` only; its metrics filter is the latest value);
- ``per-rank``: ``metric:max:val/acc@rank1 >= 0.8`` with a rank column (reads the chunks' rank);
- ``cold``: the first call of a fresh process with no store given (opening the store, one ingest pass),
  once.

MLflow runs in the bench's own venv (bench/tracking.py's ``mlflow_python``, created on first use) on
a SQLite tracking store holding the same params and points. ``--smoke``: 50 experiments, 3 repeats,
no MLflow (the suite's check that this runs; its figures mean nothing). The target is a p95 of at
most 200 ms at 1,000 experiments on this machine.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

QUERIES: dict[str, tuple[str, list[str]]] = {
    "metric": ("metric:last:val/acc >= 0.5", ["param:lr", "metric:last:val/acc"]),
    "metric+param": ("metric:last:val/acc >= 0.5 and param:optimizer = adam", ["param:lr"]),
    "per-rank": ("metric:max:val/acc@rank1 >= 0.8", ["metric:last:val/acc@rank1"]),
}
MLFLOW_FILTER = "metrics.`val/acc` >= 0.5 and params.optimizer = 'adam'"
STEPS = 20


def runs(n: int) -> list[dict[str, Any]]:
    """What each experiment reports: the same for Phalanx and MLflow."""
    rng = random.Random(28)
    out = []
    for i in range(n):
        final = rng.random()
        curve = [final * (1 - math.exp(-(s + 1) / 5)) for s in range(STEPS)]
        out.append(
            {
                "name": f"run{i}",
                "lr": rng.choice([0.1, 0.05, 0.01, 0.001]),
                "optimizer": rng.choice(["adam", "sgd"]),
                "ranks": {0: curve, 1: [v * rng.uniform(0.9, 1.1) for v in curve]},
            }
        )
    return out


def fill_phalanx(home: Path, written: list[dict[str, Any]]) -> None:
    from phalanx.config import Settings
    from phalanx.domain import Event, EventKind, ExperimentStatus, Replica, Role
    from phalanx.store import open_store

    store = open_store(Settings(home=home, db_url=None, artifacts_url=None))
    seq = 0
    for run in written:
        replicas = [Replica("", "master", Role.MASTER, 0, 0), Replica("", "worker-0", Role.WORKER, 0, 1)]
        e = store.create_experiment(
            name=run["name"], project="bench", replicas=replicas, framework="pytorch", backend="native"
        )
        now = time.time()
        store.update_experiment(e.id, status=ExperimentStatus.SUCCEEDED, started_at=now - 5, finished_at=now)
        events = []
        for key in ("lr", "optimizer"):
            seq += 1
            data = {"section": "Args", "values": {key: run[key]}}
            events.append(Event(e.id, EventKind.PARAM, data, rank=0, time=now, stream="bench", seq=seq))
        for rank, values in run["ranks"].items():
            replica = "master" if rank == 0 else "worker-0"
            for step, value in enumerate(values):
                seq += 1
                point: dict[str, Any] = {
                    "title": "val/acc",
                    "series": replica,
                    "value": value,
                    "iteration": step,
                }
                role = "master" if rank == 0 else "worker"
                at = now + step
                events.append(
                    Event(
                        e.id,
                        EventKind.SCALAR,
                        point,
                        replica,
                        role,
                        rank=rank,
                        time=at,
                        stream="bench",
                        seq=seq,
                    )
                )
        store.write_events(events)
    store.close()


def percentiles(seconds: list[float]) -> dict[str, float]:
    ms = sorted(s * 1000 for s in seconds)
    p95 = ms[min(len(ms) - 1, math.ceil(0.95 * len(ms)) - 1)]
    return {"p50_ms": statistics.median(ms), "p95_ms": p95, "calls": len(ms)}


def cpu_percentiles(seconds: list[float]) -> dict[str, float]:
    """This process's CPU time per call: what the call costs, whatever else the machine runs."""
    p = percentiles(seconds)
    return {"cpu_p50_ms": p["p50_ms"], "cpu_p95_ms": p["p95_ms"]}


def bench_phalanx(home: Path, repeats: int) -> dict[str, Any]:
    import phalanx
    from phalanx.config import Settings
    from phalanx.store import open_store

    store = open_store(Settings(home=home, db_url=None, artifacts_url=None))
    out: dict[str, Any] = {}
    for label, (where, columns) in QUERIES.items():
        phalanx.search_experiments(where, columns=columns, store=store)  # pandas imported: see "cold"
        times, cpu, rows = [], [], 0
        for _ in range(repeats):
            start, start_cpu = time.perf_counter(), time.process_time()
            frame = phalanx.search_experiments(where, columns=columns, store=store)
            times.append(time.perf_counter() - start)
            cpu.append(time.process_time() - start_cpu)
            rows = len(frame)
        out[label] = {**percentiles(times), **cpu_percentiles(cpu), "rows": rows}
    store.close()
    code = (
        "import time, phalanx; t = time.perf_counter(); "
        f"f = phalanx.search_experiments({QUERIES['metric'][0]!r}); print(time.perf_counter() - t, len(f))"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHALANX_")}
    env["PHALANX_HOME"] = str(home)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    cold, matched = done.stdout.split()
    out["cold"] = {
        "p50_ms": float(cold) * 1000,
        "p95_ms": float(cold) * 1000,
        "calls": 1,
        "rows": int(matched),
    }
    return out


MLFLOW_SCRIPT = """
import json, statistics, sys, time
import mlflow
from mlflow.entities import Metric, Param
from mlflow.tracking import MlflowClient

uri, data_file, repeats, flt = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
mlflow.set_tracking_uri(uri)
client = MlflowClient(uri)
exp = client.create_experiment("bench")
now = int(time.time() * 1000)
for run in json.load(open(data_file)):
    r = client.create_run(exp, run_name=run["name"]).info.run_id
    # one series a rank, as MLflow keeps one run per process: rank 0's is the run's val/acc
    metrics = [Metric("val/acc", v, now + s, s) for s, v in enumerate(run["ranks"]["0"])]
    metrics += [Metric("val/acc rank1", v, now + s, s) for s, v in enumerate(run["ranks"]["1"])]
    params = [Param("lr", str(run["lr"])), Param("optimizer", run["optimizer"])]
    client.log_batch(r, metrics=metrics, params=params)
    client.set_terminated(r)
mlflow.search_runs(experiment_ids=[exp], filter_string=flt, max_results=50000)  # warm, as Phalanx's
times, cpu, rows = [], [], 0
for _ in range(repeats):
    t, c = time.perf_counter(), time.process_time()
    frame = mlflow.search_runs(experiment_ids=[exp], filter_string=flt, max_results=50000)
    times.append(time.perf_counter() - t)
    cpu.append(time.process_time() - c)
    rows = len(frame)
print(json.dumps({"times": times, "cpu": cpu, "rows": rows}))
"""


def bench_mlflow(work: Path, written: list[dict[str, Any]], repeats: int) -> dict[str, Any]:
    from tracking import mlflow_python

    python = str(mlflow_python())
    (work / "mlflow_query.py").write_text(textwrap.dedent(MLFLOW_SCRIPT))
    (work / "runs.json").write_text(json.dumps(written))
    uri = f"sqlite:///{work / 'mlflow.db'}"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run(
        [python, str(work / "mlflow_query.py"), uri, str(work / "runs.json"), str(repeats), MLFLOW_FILTER],
        env=env, cwd=work, capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"the MLflow part failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    doc = json.loads(done.stdout.strip().splitlines()[-1])
    return {"metric+param": {**percentiles(doc["times"]), **cpu_percentiles(doc["cpu"]), "rows": doc["rows"]}}


def table(results: dict[str, Any], n: int) -> str:
    lines = [
        f"search over {n} experiments, ms (wall p50 / p95; CPU p95: the call's own cost on a loaded machine)",
        "| query | Phalanx wall p50 | wall p95 | CPU p95 | rows | MLflow wall p50 | wall p95 | CPU p95 |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    m = results.get("mlflow", {})
    for label, p in results["phalanx"].items():
        o = m.get(label)
        tail = f"{o['p50_ms']:.1f} | {o['p95_ms']:.1f} | {o['cpu_p95_ms']:.1f} |" if o else "- | - | - |"
        cpu = f"{p['cpu_p95_ms']:.1f}" if "cpu_p95_ms" in p else "-"
        lines.append(f"| {label} | {p['p50_ms']:.1f} | {p['p95_ms']:.1f} | {cpu} | {p['rows']} | {tail}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--experiments", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=30, help="timed calls per query")
    parser.add_argument("--skip-mlflow", action="store_true")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--smoke", action="store_true", help="50 experiments, 3 calls, no MLflow (the suite's run)"
    )
    args = parser.parse_args()
    if args.smoke:
        args.experiments, args.repeats, args.skip_mlflow = 50, 3, True
    written = runs(args.experiments)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="phalanx-bench-query-") as tmp:
        work = Path(tmp)
        fill_phalanx(work / "home", written)
        load = os.getloadavg()[0]
        results["phalanx"] = bench_phalanx(work / "home", args.repeats)
        print(table(results, args.experiments), flush=True)  # kept should the MLflow part fail
        if not args.skip_mlflow:
            for run in written:  # JSON keys are text
                run["ranks"] = {str(k): v for k, v in run["ranks"].items()}
            results["mlflow"] = bench_mlflow(work, written, args.repeats)
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"load average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
    )
    print(table(results, args.experiments))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
