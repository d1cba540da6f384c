"""Tracking throughput: Phalanx vs MLflow's batched log_batch vs raw sqlite3, in one run.

    .venv/bin/python bench/tracking.py [--points 1000000] [--rounds 3] [--mlflow-points 100000] [--json FILE]

For each contender, the same scalar points ("loss", "worker NN", step, value, time):
- call cost on the caller's thread (median, p99): Phalanx's report_scalar; MLflow's log_batch of
  1,000 metrics divided by 1,000 (its fastest way to record a point); sqlite3 has no call to measure;
- points per second from the first call until the points are stored and readable, from 1 process and
  from 4 processes writing one experiment (one MLflow run) at once; lost points (reported, never stored:
  points a writer's flush gave up waiting for are counted once the ingester has taken them);
- the time to read a 100,000-point series back.

Phalanx runs as under `phalanx run`: the writers are replicas reporting into an existing experiment,
an Ingester thread in this process plays the supervisor's (its store the supervisor's lean
``sqlite3`` writer, its helper processes started as a supervisor's are: ``--no-helpers`` leaves it
alone), and a writer's time ends when ``task.flush()`` returns, i.e. when its points are visible in
the store. MLflow (the best anchor:
a SQLAlchemy store on SQLite, log_batch) is installed into its own venv under
~/.cache/phalanx-bench (or PHALANX_BENCH_DIR), never into the project's. raw sqlite3 executemany of
the same rows (rowid, series, step, value, time, replica, rank) into a plain table is the anchor,
run alternately with Phalanx (raw, Phalanx, raw, Phalanx: ``--rounds``) so that the load of a shared
machine hits both; the ratios are per round, their median is printed with the load average, and the
bytes per point are the Phalanx database's size after compaction over the points it stored. Not run
by the tests (`make bench` runs it; the suite runs ``--smoke``); the figures belong to the machine
that measured them: compare the ratios.
"""

from __future__ import annotations

import argparse
import json
import math
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

# what a training loop reports: a decaying loss with noise (a constant would compress to nothing)
VALUES = """
import math, random
rng = random.Random(rank)
values = [2.0 * math.exp(-i / (n / 4 + 1)) + rng.gauss(0, 0.05) for i in range(n)]
"""

PHALANX_WRITER = (
    """
import json, sys, time
from pathlib import Path
from phalanx import Task
rank, n, go, timed = int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3]), sys.argv[4] == "timed"
"""
    + VALUES
    + """
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
        report("loss", series, values[i], i)
        lat.append(clock() - a)
else:
    for i in range(n):
        report("loss", series, values[i], i)
ok = task.flush(timeout=900)
print(json.dumps({"t0": t0, "t1": time.time(), "ok": ok, "lat": sorted(lat)[:: max(1, len(lat) // 20000)]}))
"""
)

RAW_WRITER = (
    """
import json, sqlite3, sys, time
from pathlib import Path
rank, n, go, db = int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]
"""
    + VALUES
    + """
con = sqlite3.connect(db, timeout=600, isolation_level=None)
con.execute("PRAGMA journal_mode=WAL"); con.execute("PRAGMA synchronous=NORMAL")
while not go.exists():
    time.sleep(0.001)
t0 = time.time()
for start in range(0, n, 10000):
    end = min(n, start + 10000)
    rows = [(rank + 1, i, values[i], time.time(), "worker", rank) for i in range(start, end)]
    con.execute("BEGIN IMMEDIATE")
    con.executemany(
        "INSERT INTO scalars (series_id, step, value, time, replica, rank) VALUES (?, ?, ?, ?, ?, ?)", rows
    )
    con.execute("COMMIT")
print(json.dumps({"t0": t0, "t1": time.time(), "ok": True, "lat": []}))
"""
)

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


class PhalanxCase:
    """Phalanx's side: one store and an Ingester thread (the supervisor's) for every round; each case
    reports into an experiment of its own."""

    def __init__(self, work: Path, attempt: int | None, helpers: bool = True) -> None:
        sys.path.insert(0, str(REPO / "src"))
        from phalanx.config import Settings
        from phalanx.ingest import Ingester
        from phalanx.ingest_helpers import Helpers
        from phalanx.store import open_store
        from phalanx.store.lite_writer import LiteWriter
        from phalanx.store.migrations import HEAD

        self.work, self.attempt, self.home = work, attempt, work / "phalanx"
        settings = Settings(home=self.home, db_url=None, artifacts_url=None)
        self.store = open_store(settings)
        # a supervisor's writer: the standard library's sqlite3 on an up-to-date SQLite file
        lean = LiteWriter.open(settings.database_url, HEAD, lambda: self.store, settings.artifacts_root)
        self.stop = threading.Event()
        spool = self.home / "spool"
        # as a supervisor's: helper processes join it while several replicas flood it
        joining = Helpers(
            settings, spool, work / "ingest-helpers.log", claimed=False, most=None if helpers else 0
        )
        self.ingester = threading.Thread(
            target=Ingester(lean or self.store, None, spool, helpers=joining).run,
            args=(self.stop, 0.05),
            daemon=True,
        )
        self.ingester.start()
        self.script = work / "phalanx_writer.py"
        self.script.write_text(PHALANX_WRITER)
        self.stored = 0

    def run(self, label: str, procs: int, n: int, timed: bool = False) -> dict[str, Any]:
        exp = self.store.create_experiment(name=f"bench-{label}", project="bench").id
        spool = str(self.home / "spool" / exp)
        env = _env(
            PHALANX_HOME=str(self.home), PHALANX_EXPERIMENT_ID=exp, PHALANX_SPOOL=spool,
            PHALANX_INGESTER_PID=str(os.getpid()), PHALANX_CAPTURED="1", PYTHONPATH=str(REPO / "src"),
        )  # fmt: skip
        if self.attempt is not None:  # records carry an attempt: the store checks each series' (issue 18)
            env["PHALANX_ATTEMPT"] = str(self.attempt)
        per = n // procs if not timed else min(n, 300_000)
        argvs = [
            [sys.executable, str(self.script), str(r), str(per), "timed" if timed else "fast"]
            for r in range(procs)
        ]
        results = _race(argvs, env, self.work)
        reported = per * procs
        stored = self._stored(exp)
        out: dict[str, Any] = {"rate": _rate(results, reported)}
        if not all(r["ok"] for r in results):  # a flush gave up waiting: late is not lost
            out["flush_timeouts"] = True
            drained, when = self._drained(exp, reported)
            out["late"] = drained - stored
            stored = drained  # the rate then runs to when the last of them was seen stored
            out["rate"] = reported / (when - min(r["t0"] for r in results))
        out["lost"] = reported - stored  # reported and never stored
        self.stored += stored
        if timed:
            out["call_median_us"], out["call_p99_us"] = _lat(results[0]["lat"])
        return out

    def _stored(self, exp: str) -> int:
        return sum(len(s.steps) for s in self.store.metrics(exp, title="loss").get("loss", {}).values())

    def _drained(self, exp: str, reported: int, quiet_s: float = 30.0) -> tuple[int, float]:
        """(points stored, when the last of them was seen stored) once the ingester has taken all
        it will: ``reported``, or as many as it reached when ``quiet_s`` passed with none more. It
        looks once a second: each look reads the whole series, on the cores the ingester uses."""
        stored, seen = self._stored(exp), time.time()
        while stored < reported and time.time() - seen < quiet_s:
            time.sleep(1.0)
            if (now := self._stored(exp)) > stored:
                stored, seen = now, time.time()
        return stored, seen

    def finish(self, n: int) -> dict[str, Any]:
        """Bytes per stored point (the whole database after compaction: points, summary, keys) and
        the time to read a series back."""
        from phalanx.domain import Event, EventKind
        from phalanx.spool import encode_points

        self.stop.set()
        self.ingester.join(600)
        self.store.compact()
        db = self.home / "phalanx.db"
        out: dict[str, Any] = {"bytes_per_point": db.stat().st_size / max(1, self.stored)}
        exp = self.store.create_experiment(name="readback", project="bench").id
        readback = min(READBACK_POINTS, n)  # a smoke run's few points read back as they are
        points = [("loss", "worker 00", i, 0.5, time.time()) for i in range(readback)]
        batches = [points[i : i + 10000] for i in range(0, readback, 10000)]
        self.store.write_events(
            [
                Event(exp, EventKind.SCALAR, encode_points(b), stream="rb", seq=i)
                for i, b in enumerate(batches)
            ]
        )
        reads = []
        for _ in range(5):
            t = time.perf_counter()
            series = self.store.metrics(exp, title="loss", series="worker 00")["loss"]["worker 00"]
            reads.append(time.perf_counter() - t)
            assert len(series.steps) == readback
        out["read_s"] = statistics.median(reads)
        return out


class RawCase:
    """The anchor: the same rows through raw sqlite3 ``executemany`` into a plain table (a rowid
    and the columns, no other index), a fresh database per case."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.script = work / "raw_writer.py"
        self.script.write_text(RAW_WRITER)
        self.cases = 0
        self.bytes_per_point = math.nan

    def run(self, procs: int, n: int) -> dict[str, Any]:
        import sqlite3

        self.cases += 1
        db = self.work / f"raw-{self.cases}.db"
        con = sqlite3.connect(db, isolation_level=None)
        con.execute("PRAGMA journal_mode=WAL")
        con.execute(
            "CREATE TABLE scalars (id INTEGER PRIMARY KEY, series_id INTEGER, step BIGINT, value FLOAT, "
            "time FLOAT, replica VARCHAR(64), rank INTEGER)"
        )
        per = n // procs
        argvs = [[sys.executable, str(self.script), str(r), str(per), str(db)] for r in range(procs)]
        results = _race(argvs, _env(), self.work)
        stored = con.execute("SELECT count(*) FROM scalars").fetchone()[0]
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self.bytes_per_point = db.stat().st_size / max(1, stored)
        con.close()
        db.unlink()
        return {"rate": _rate(results, per * procs), "lost": per * procs - stored}


def bench_interleaved(
    n: int, rounds: int, work: Path, attempt: int | None, helpers: bool = True
) -> dict[str, dict[str, Any]]:
    """Raw and Phalanx, 1 then 4 processes, alternating (raw, Phalanx, raw, Phalanx per round), so
    that a swing of the machine's load hits both; the ratio is taken per round, then its median."""
    phalanx, raw = PhalanxCase(work, attempt, helpers), RawCase(work)
    p: dict[str, Any] = {}
    p.update(phalanx.run("call", 1, n, timed=True))
    rates: dict[str, list[tuple[float, float]]] = {"1": [], "4": []}
    lost = {"raw": {"1": 0, "4": 0}, "phalanx": {"1": 0, "4": 0}}
    late = {"1": 0, "4": 0}  # Phalanx's points stored after a writer's flush gave up waiting
    for r in range(rounds):
        for procs in (1, 4):
            label = str(procs)
            a = raw.run(procs, n)
            b = phalanx.run(f"{label}-{r}", procs, n)
            rates[label].append((a["rate"], b["rate"]))
            lost["raw"][label] += a["lost"]
            lost["phalanx"][label] += b["lost"]
            late[label] += b.get("late", 0)
            print(f"round {r + 1}/{rounds}, {procs} process(es): raw {a['rate']:,.0f} points/s, "
                  f"Phalanx {b['rate']:,.0f} ({b['rate'] / a['rate']:.2f}x), "
                  f"load average {os.getloadavg()[0]:.1f}"
                  + (f"; a flush gave up: {b['late']:,} points stored after it" if "late" in b else ""),
                  file=sys.stderr, flush=True)  # fmt: skip
    p.update(phalanx.finish(n))
    out: dict[str, dict[str, Any]] = {"raw": {"bytes_per_point": raw.bytes_per_point}, "phalanx": p}
    for label, pairs in rates.items():
        out["raw"][f"rate_{label}"] = statistics.median(a for a, _ in pairs)
        out["raw"][f"lost_{label}"] = lost["raw"][label]
        p[f"rate_{label}"] = statistics.median(b for _, b in pairs)
        p[f"lost_{label}"] = lost["phalanx"][label]
        p[f"late_{label}"] = late[label]
        p[f"ratio_{label}"] = statistics.median(b / a for a, b in pairs)
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
        "| lost (1 / 4) | read 100k-point series (s) | bytes per point |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    names = {
        "phalanx": "Phalanx",
        "mlflow": "MLflow log_batch",
        "raw": "raw sqlite3 executemany, plain table",
    }
    for key, label in names.items():
        r = results.get(key)
        if r is None:
            continue
        rows.append(
            f"| {label} | {f(r.get('call_median_us'), '.2f')} | {f(r.get('call_p99_us'), '.2f')} "
            f"| {f(r.get('rate_1'), ',.0f')} | {f(r.get('rate_4'), ',.0f')} "
            f"| {r.get('lost_1', '-')} / {r.get('lost_4', '-')} | {f(r.get('read_s'), '.3f')} "
            f"| {f(r.get('bytes_per_point'), '.1f')} |"
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
            f"Phalanx vs raw sqlite3 executemany (median of the per-round ratios): {p['ratio_1']:.2f}x "
            f"(1 process; target >= 1.0x), {p['ratio_4']:.2f}x (4 processes; target >= 1.2x); "
            f"{p['bytes_per_point']:.1f} bytes per point stored (target <= 20)."
        )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--points", type=int, default=1_000_000, help="points per run for Phalanx and sqlite3"
    )
    parser.add_argument("--mlflow-points", type=int, default=100_000, help="points per run for MLflow")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of raw, Phalanx (1 and 4 processes)")
    parser.add_argument("--skip-mlflow", action="store_true")
    parser.add_argument(
        "--no-helpers", action="store_true", help="Phalanx's ingester alone, as before issue 42's helpers"
    )
    parser.add_argument("--attempt", type=int, help="writers report as this attempt (PHALANX_ATTEMPT)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="tiny sizes, one round: the suite's check that the bench runs (its figures mean nothing)",
    )
    args = parser.parse_args()
    if args.smoke:  # MLflow needs its own venv, built on first use: not in a smoke run
        args.points, args.skip_mlflow, args.rounds = 2000, True, 1
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="phalanx-bench-") as tmp:
        work = Path(tmp)
        load = os.getloadavg()[0]
        results.update(bench_interleaved(args.points, args.rounds, work, args.attempt, not args.no_helpers))
        if not args.skip_mlflow:
            results["mlflow"] = bench_mlflow(args.mlflow_points, work)
    cpus = os.cpu_count()
    print(f"machine: {platform.machine()}, {cpus} cores, Python {platform.python_version()}, "
          f"load average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end")  # fmt: skip
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
