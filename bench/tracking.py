"""Tracking throughput: Phalanx vs MLflow's batched log_batch vs raw sqlite3, in one run.

    .venv/bin/python bench/tracking.py [--points 1000000] [--mlflow-points 100000] [--json FILE]

For each contender, the same scalar points ("loss", "worker NN", step, value, time):
- call cost on the caller's thread (median, p99): Phalanx's report_scalar; MLflow's log_batch of
  1,000 metrics divided by 1,000 (its fastest way to record a point); sqlite3 has no call to measure;
- points per second from the first call until the points are stored and readable, from 1 process and
  from 4 processes writing one experiment (one MLflow run) at once; lost points (reported, not stored);
- the time to read a 100,000-point series back.

Phalanx runs as under `phalanx run`: the writers are replicas reporting into an existing experiment,
an Ingester thread in this process plays the supervisor's, and a writer's time ends when
``task.flush()`` returns, i.e. when its points are visible in the store. MLflow (the best anchor:
a SQLAlchemy store on SQLite, log_batch) is installed into its own venv under
~/.cache/phalanx-bench (or PHALANX_BENCH_DIR), never into the project's. raw sqlite3 executemany of
the same rows into the same table and index is the limit. Not run by the tests (`make bench` runs it);
the figures belong to the machine that measured them: compare the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BENCH_DIR = Path(os.environ.get("PHALANX_BENCH_DIR", Path.home() / ".cache" / "phalanx-bench"))
MLFLOW_PIN = "mlflow==3.17.2"
READBACK_POINTS = 100_000

PHALANX_WRITER = """
import json, sys, time
from pathlib import Path
from phalanx import Task
rank, n, go, timed = int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3]), sys.argv[4] == "timed"
task = Task.init()
report = task.get_logger().report_scalar
series = f"worker {rank:02d}"
lat = []
while not go.exists():
    time.sleep(0.001)
t0 = time.time()
if timed:
    clock = time.perf_counter_ns
    for i in range(n):
        a = clock()
        report("loss", series, 0.5, i)
        lat.append(clock() - a)
else:
    for i in range(n):
        report("loss", series, 0.5, i)
ok = task.flush(timeout=900)
print(json.dumps({"t0": t0, "t1": time.time(), "ok": ok, "lat": sorted(lat)[:: max(1, len(lat) // 20000)]}))
"""

RAW_WRITER = """
import json, sqlite3, sys, time
from pathlib import Path
rank, n, go, db = int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]
con = sqlite3.connect(db, timeout=600, isolation_level=None)
con.execute("PRAGMA journal_mode=WAL"); con.execute("PRAGMA synchronous=NORMAL")
while not go.exists():
    time.sleep(0.001)
t0 = time.time()
for start in range(0, n, 10000):
    rows = [(rank + 1, i, 0.5, time.time(), "worker", rank) for i in range(start, min(n, start + 10000))]
    con.execute("BEGIN IMMEDIATE")
    con.executemany(
        "INSERT INTO scalars (series_id, step, value, time, replica, rank) VALUES (?, ?, ?, ?, ?, ?)", rows
    )
    con.execute("COMMIT")
print(json.dumps({"t0": t0, "t1": time.time(), "ok": True, "lat": []}))
"""

MLFLOW_WRITER = """
import json, sys, time
from pathlib import Path
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient
rank, n, go, uri, run_id = int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3]), sys.argv[4], sys.argv[5]
client = MlflowClient(tracking_uri=uri)
key = f"loss/worker {rank:02d}"
lat, lost = [], 0
while not go.exists():
    time.sleep(0.001)
t0 = time.time()
for start in range(0, n, 1000):
    batch = [Metric(key, 0.5, int(time.time() * 1000), i) for i in range(start, min(n, start + 1000))]
    a = time.perf_counter_ns()
    try:
        client.log_batch(run_id, metrics=batch)
    except Exception as exc:  # what a user loses: the batch is gone
        lost += len(batch)
        print(f"rank {rank}: {type(exc).__name__}: {str(exc)[:200]}", file=sys.stderr)
    lat.append((time.perf_counter_ns() - a) / len(batch))
print(json.dumps({"t0": t0, "t1": time.time(), "ok": True, "lost": lost, "lat": sorted(lat)}))
"""

MLFLOW_SETUP = """
import sys
from mlflow.tracking import MlflowClient
client = MlflowClient(tracking_uri=sys.argv[1])
exp = client.create_experiment(sys.argv[2])
print(client.create_run(exp).info.run_id)
"""

MLFLOW_READ = """
import json, statistics, sys, time
from mlflow.tracking import MlflowClient
client = MlflowClient(tracking_uri=sys.argv[1])
times, n = [], 0
for _ in range(3):
    t = time.perf_counter()
    n = len(client.get_metric_history(sys.argv[2], sys.argv[3]))
    times.append(time.perf_counter() - t)
print(json.dumps({"read": statistics.median(times), "n": n}))
"""


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHALANX_")}
    env.update(extra)
    return env


def _race(argvs: list[list[str]], env: dict[str, str], workdir: Path) -> list[dict[str, Any]]:
    """Start the writers, release them together (a go file), return what each printed."""
    go = workdir / f"go-{time.monotonic_ns()}"
    procs = [
        subprocess.Popen([*argv[:4], str(go), *argv[4:]], env=env, stdout=subprocess.PIPE, text=True)
        for argv in argvs
    ]
    time.sleep(1.5)  # let them import
    go.touch()
    results = []
    for p in procs:
        out, _ = p.communicate(timeout=3600)
        if p.returncode != 0:
            raise RuntimeError(f"writer failed ({p.returncode}): {out[-2000:]}")
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


def _rate(results: list[dict[str, Any]], total: int) -> float:
    return total / float(max(r["t1"] for r in results) - min(r["t0"] for r in results))


def _lat(values: list[float]) -> tuple[float, float]:
    if not values:
        return (float("nan"), float("nan"))
    values = sorted(values)
    return values[len(values) // 2] / 1000, values[min(len(values) - 1, int(len(values) * 0.99))] / 1000


# --- contenders --------------------------------------------------------------------------------------


def bench_phalanx(n: int, work: Path, attempt: int | None = None) -> dict[str, Any]:
    sys.path.insert(0, str(REPO / "src"))
    from phalanx.config import Settings
    from phalanx.domain import Event, EventKind
    from phalanx.ingest import Ingester
    from phalanx.store import open_store
    from phalanx.tracking.spool import encode_points

    home = work / "phalanx"
    store = open_store(Settings(home=home, db_url=None, artifacts_url=None))
    stop = threading.Event()
    ingester = threading.Thread(
        target=Ingester(store, None, home / "spool").run, args=(stop, 0.05), daemon=True
    )
    ingester.start()
    script = work / "phalanx_writer.py"
    script.write_text(PHALANX_WRITER)
    out: dict[str, Any] = {}
    for label, procs, timed in (("call", 1, True), ("1", 1, False), ("4", 4, False)):
        exp = store.create_experiment(name=f"bench-{label}", project="bench").id
        env = _env(
            PHALANX_HOME=str(home), PHALANX_EXPERIMENT_ID=exp, PHALANX_SPOOL=str(home / "spool" / exp),
            PHALANX_INGESTER_PID=str(os.getpid()), PHALANX_CAPTURED="1", PYTHONPATH=str(REPO / "src"),
        )  # fmt: skip
        if attempt is not None:  # records carry an attempt: the store checks each series' (issue 18)
            env["PHALANX_ATTEMPT"] = str(attempt)
        per = n // procs if not timed else min(n, 300_000)
        argvs = [
            [sys.executable, str(script), str(r), str(per), "timed" if timed else "fast"]
            for r in range(procs)
        ]
        results = _race(argvs, env, work)
        stored = sum(len(s.steps) for s in store.metrics(exp, title="loss").get("loss", {}).values())
        if timed:
            out["call_median_us"], out["call_p99_us"] = _lat(results[0]["lat"])
        else:
            out[f"rate_{label}"] = _rate(results, per * procs)
            out[f"lost_{label}"] = per * procs - stored
        if not all(r["ok"] for r in results):
            out["flush_timeouts"] = True
    stop.set()
    ingester.join(600)
    exp = store.create_experiment(name="readback", project="bench").id
    readback = min(READBACK_POINTS, n)  # a smoke run's few points read back as they are
    points = [("loss", "worker 00", i, 0.5, time.time()) for i in range(readback)]
    store.write_events([Event(exp, EventKind.SCALAR, encode_points(points[i : i + 10000]), stream="rb", seq=i)
                        for i in range(0, readback, 10000)])  # fmt: skip
    reads = []
    for _ in range(5):
        t = time.perf_counter()
        series = store.metrics(exp, title="loss", series="worker 00")["loss"]["worker 00"]
        reads.append(time.perf_counter() - t)
        assert len(series.steps) == readback
    out["read_s"] = statistics.median(reads)
    return out


def bench_raw(n: int, work: Path) -> dict[str, Any]:
    import sqlite3

    readback = min(READBACK_POINTS, n)
    script = work / "raw_writer.py"
    script.write_text(RAW_WRITER)
    out: dict[str, Any] = {}
    for label, procs in (("1", 1), ("4", 4)):
        db = work / f"raw-{label}.db"
        con = sqlite3.connect(db, isolation_level=None)
        con.execute("PRAGMA journal_mode=WAL")
        con.execute(
            "CREATE TABLE scalars (id INTEGER PRIMARY KEY, series_id INTEGER, step BIGINT, value FLOAT, "
            "time FLOAT, replica VARCHAR(64), rank INTEGER)"
        )
        con.execute("CREATE INDEX ix_scalars_series_step ON scalars (series_id, step)")
        per = n // procs
        results = _race(
            [[sys.executable, str(script), str(r), str(per), str(db)] for r in range(procs)], _env(), work
        )
        out[f"rate_{label}"] = _rate(results, per * procs)
        out[f"lost_{label}"] = per * procs - con.execute("SELECT count(*) FROM scalars").fetchone()[0]
        if label == "1":
            reads = []
            for _ in range(5):
                t = time.perf_counter()
                rows = con.execute(
                    "SELECT step, value, time FROM scalars WHERE series_id = 1 AND step < ? ORDER BY step",
                    (readback,),
                ).fetchall()
                reads.append(time.perf_counter() - t)
                assert len(rows) == readback
            out["read_s"] = statistics.median(reads)
        con.close()
    return out


def mlflow_python() -> Path:
    """The bench's own venv with MLflow (created on first use; never the project's .venv)."""
    venv = BENCH_DIR / "mlflow-venv"
    python = venv / "bin" / "python"
    ok = (
        python.exists()
        and subprocess.run([str(python), "-c", "import mlflow"], capture_output=True).returncode == 0
    )
    if not ok:
        BENCH_DIR.mkdir(parents=True, exist_ok=True)
        print(f"installing {MLFLOW_PIN} into {venv} (once)...", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", MLFLOW_PIN], check=True)
    return python


def bench_mlflow(n: int, work: Path) -> dict[str, Any]:
    python = str(mlflow_python())
    for name, text in (("w", MLFLOW_WRITER), ("s", MLFLOW_SETUP), ("r", MLFLOW_READ)):
        (work / f"mlflow_{name}.py").write_text(textwrap.dedent(text))
    env = _env(MLFLOW_TRACKING_URI="", GIT_PYTHON_REFRESH="quiet")
    out: dict[str, Any] = {}
    lat: list[float] = []
    for label, procs in (("1", 1), ("4", 4)):
        uri = f"sqlite:///{work / f'mlflow-{label}.db'}"
        setup = subprocess.run(
            [python, str(work / "mlflow_s.py"), uri, f"bench-{label}"],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        run_id = setup.stdout.strip().splitlines()[-1]
        per = n // procs
        argvs = [[python, str(work / "mlflow_w.py"), str(r), str(per), uri, run_id] for r in range(procs)]
        results = _race(argvs, env, work)
        out[f"rate_{label}"] = _rate(results, per * procs)
        out[f"lost_{label}"] = sum(r.get("lost", 0) for r in results)
        lat += [x for r in results for x in r["lat"]]
        if label == "1":
            read = subprocess.run([python, str(work / "mlflow_r.py"), uri, run_id, "loss/worker 00"], env=env,
                                  check=True, capture_output=True, text=True)  # fmt: skip
            doc = json.loads(read.stdout.strip().splitlines()[-1])
            out["read_s"] = doc["read"] * READBACK_POINTS / max(1, doc["n"])  # scaled to 100k if fewer
            out["read_points"] = doc["n"]
    out["call_median_us"], out["call_p99_us"] = _lat(lat)
    return out


# --- report ------------------------------------------------------------------------------------------


def table(results: dict[str, dict[str, Any]]) -> str:
    def f(v: Any, fmt: str) -> str:
        return "-" if v is None or v != v else format(v, fmt)

    rows = [
        "| | call median (µs) | call p99 (µs) | points/s stored, 1 process | points/s stored, 4 processes "
        "| lost (1 / 4) | read 100k-point series (s) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    names = {"phalanx": "Phalanx", "mlflow": "MLflow log_batch", "raw": "raw sqlite3 executemany (limit)"}
    for key, label in names.items():
        r = results.get(key)
        if r is None:
            continue
        rows.append(
            f"| {label} | {f(r.get('call_median_us'), '.2f')} | {f(r.get('call_p99_us'), '.2f')} "
            f"| {f(r.get('rate_1'), ',.0f')} | {f(r.get('rate_4'), ',.0f')} "
            f"| {r.get('lost_1', '-')} / {r.get('lost_4', '-')} | {f(r.get('read_s'), '.3f')} |"
        )
    p, m, raw = results.get("phalanx"), results.get("mlflow"), results.get("raw")
    if p and m:
        rows.append("")
        rows.append(
            f"Phalanx vs MLflow: {p['rate_1'] / m['rate_1']:.0f}x points/s (1 process), "
            f"{p['rate_4'] / m['rate_4']:.0f}x (4 processes), "
            f"read-back {m['read_s'] / p['read_s']:.0f}x faster."
        )
    if p and raw:
        rows.append(
            f"Phalanx vs raw sqlite3: {p['rate_1'] / raw['rate_1']:.2f}x (1 process), "
            f"{p['rate_4'] / raw['rate_4']:.2f}x (4 processes), read-back {raw['read_s'] / p['read_s']:.2f}x."
        )
    return "\n".join(rows)


def _medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One case's figures over the rounds: the median of each number, the first round's other values."""
    out = dict(runs[0])
    for key, value in runs[0].items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            out[key] = statistics.median(r[key] for r in runs)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--points", type=int, default=1_000_000, help="points per run for Phalanx and sqlite3"
    )
    parser.add_argument("--mlflow-points", type=int, default=100_000, help="points per run for MLflow")
    parser.add_argument("--skip-mlflow", action="store_true")
    parser.add_argument("--attempt", type=int, help="writers report as this attempt (PHALANX_ATTEMPT)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds (medians reported)")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="tiny sizes, one round: the suite's check that the bench runs (its figures mean nothing)",
    )
    args = parser.parse_args()
    if args.smoke:  # MLflow needs its own venv, built on first use: not in a smoke run
        args.points, args.skip_mlflow = 2000, True
    if args.smoke:
        args.rounds = 1
    rounds: dict[str, list[dict[str, Any]]] = {"raw": [], "phalanx": []}
    if not args.skip_mlflow:
        rounds["mlflow"] = []
    with tempfile.TemporaryDirectory(prefix="phalanx-bench-") as tmp:
        # raw, phalanx, mlflow, raw, phalanx, mlflow ...: a load swing on a shared machine touches
        # every case alike; each figure is the median over the rounds
        for r in range(args.rounds):
            work = Path(tmp) / f"round-{r}"
            work.mkdir()
            rounds["raw"].append(bench_raw(args.points, work))
            rounds["phalanx"].append(bench_phalanx(args.points, work, args.attempt))
            if not args.skip_mlflow:
                rounds["mlflow"].append(bench_mlflow(args.mlflow_points, work))
    results = {name: _medians(runs) for name, runs in rounds.items()}
    cpus = os.cpu_count()
    load = os.getloadavg()
    print(f"machine: {platform.machine()}, {cpus} cores, Python {platform.python_version()}, "
          f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}; "
          f"{args.rounds} alternating rounds")  # fmt: skip
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
