"""A team on one server: many experiments' ranks reporting through `phalanx server` into PostgreSQL.

    .venv/bin/python bench/scale.py [--experiments 100] [--ranks 16] [--scalars 10] [--seconds 120]
                                    [--senders 16] [--copy-points 200000] [--db-url URL] [--json FILE]

Two parts, each printing the load average:

1. PostgreSQL ingest against raw inserts of the same rows, in the same run, alternated (A B C A B C):
   A: Phalanx's store writes ``--copy-points`` points as the ingest path does (SCALAR records of
   the SDK's column form, 16 writers, 1,000 points a record); B: raw ``executemany`` of the same
   points as rows (series, step, value, time, replica, rank) into a plain table; C: raw ``COPY`` of
   them. Points/s of each and the ratios A/B, A/C.
2. The team: ``--experiments`` running experiments x ``--ranks`` ranks, each rank reporting
   ``--scalars`` scalars a second (one step a second) for ``--seconds``, sent as the tracking SDK's
   shipper sends them (every 0.2 s the points gathered since the last answer, one POST
   /api/v1/ingest at a time per rank; a slow server makes the batches bigger, not more) by
   ``--senders`` connections in a process of their own. Meanwhile this process reads the list
   (``/experiments?limit=50``) and a running experiment's chart (compact, cold: a running
   experiment's answers are never cached) in turn. Reported: offered and sustained points/s
   (acknowledged = stored: the route answers after the transaction), p50/p99 of a POST and of a
   point's age when stored, bytes per stored point (the database's tables over the points), list and
   chart p50/p99 during the load.

The bench starts its own PostgreSQL the way the tests do (tests/support/postgres.py: initdb in /tmp,
loopback only, fsync off — as a CI database, not as a durable one) unless ``--db-url`` names one;
without PostgreSQL installed it says so and uses SQLite. ``--smoke``: tiny sizes, figures mean nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import math
import multiprocessing
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# not bench/ itself: bench/queue.py would stand in for the standard library's queue (psycopg uses it)
sys.path[:] = [str(REPO / "src"), str(REPO)] + [
    p for p in sys.path if Path(p or ".").resolve() != REPO / "bench"
]

RECORD_POINTS = 1000  # points per SCALAR record in part 1 (the SDK packs a flush's points in one)
SHIP_INTERVAL = 0.2  # the shipper's wait between two batches (phalanx.tracking.shipper)


def load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return math.nan
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * q))]


# --- the database --------------------------------------------------------------------------------


@contextlib.contextmanager
def database(url: str | None, home: Path) -> Any:
    """A database URL (ours, started here, or the one given) and its kind."""
    if url:
        yield url
        return
    from tests.support import postgres

    why = postgres.unavailable_reason()
    if why:
        print(f"PostgreSQL unavailable ({why}): SQLite instead")
        yield f"sqlite:///{home / 'phalanx.db'}"
        return
    server = postgres.start_postgres()
    try:
        yield server.create_database("phalanx_scale")
    finally:
        server.stop()


def table_bytes(store: Any) -> int:
    """Bytes the scalar tables take (points, their summary, the series), indexes included."""
    from sqlalchemy import text

    tables = ("scalar_chunks", "scalar_summary", "series")
    with store.engine.connect() as conn:
        if conn.dialect.name == "postgresql":
            return sum(
                int(conn.execute(text(f"SELECT pg_total_relation_size('{t}')")).scalar_one()) for t in tables
            )
        conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
        return int(
            conn.execute(
                text("SELECT sum(pgsize) FROM dbstat WHERE name IN ('scalar_chunks', 'scalar_summary')")
            ).scalar_one()
        )


# --- part 1: the store against raw inserts ---------------------------------------------------------


def points_of(n: int, writers: int) -> list[tuple[int, list[int], list[float], list[float]]]:
    """(rank, steps, values, times) per writer, ``n`` points in all: a noisy decaying loss."""
    per = max(n // writers, 1)
    out = []
    for rank in range(writers):
        rng = random.Random(rank)
        values = [2.0 * math.exp(-i / (per / 4 + 1)) + rng.gauss(0, 0.05) for i in range(per)]
        out.append((rank, list(range(per)), values, [1.7e9 + i * 0.1 for i in range(per)]))
    return out


def store_points(store: Any, experiment: str, cols: list[Any], stream: str) -> float:
    """Seconds for the store to take the points as the ingest route hands them over."""
    from phalanx.domain import Event, EventKind
    from phalanx.spool import encode_points

    events = []
    for rank, steps, values, times in cols:
        for start in range(0, len(steps), RECORD_POINTS):
            end = start + RECORD_POINTS
            pts = [
                ("loss", f"rank {rank}", s, v, t)
                for s, v, t in zip(steps[start:end], values[start:end], times[start:end], strict=True)
            ]
            events.append(
                Event(
                    experiment,
                    EventKind.SCALAR,
                    encode_points(pts),
                    stream=f"{stream}-{rank}",
                    seq=start,
                    replica=f"worker-{rank}",
                    rank=rank,
                )
            )
    started = time.perf_counter()
    for i in range(0, len(events), 16):  # a batch: one record of each writer, as a flush brings them
        store.write_events(events[i : i + 16])
    return time.perf_counter() - started


def raw_rows(store: Any, cols: list[Any], how: str, table: str) -> float:
    """Seconds to insert the same points as plain rows (``executemany`` or ``COPY``)."""
    rows = [
        (rank, s, v, t, f"worker-{rank}", rank)
        for rank, steps, values, times in cols
        for s, v, t in zip(steps, values, times, strict=True)
    ]
    raw = store.engine.raw_connection()
    try:
        cur = raw.cursor()
        postgres = store.engine.dialect.name == "postgresql"
        real = "double precision" if postgres else "REAL"
        cur.execute(
            f"CREATE TABLE {table} (id {'bigserial' if postgres else 'INTEGER'} PRIMARY KEY, series_id int, "
            f"step bigint, value {real}, time {real}, replica text, rank int)"
        )
        raw.commit()
        started = time.perf_counter()
        columns = "series_id, step, value, time, replica, rank"
        if how == "copy" and postgres:
            with cur.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
        else:
            mark = "%s" if postgres else "?"
            cur.executemany(f"INSERT INTO {table} ({columns}) VALUES ({', '.join([mark] * 6)})", rows)
        raw.commit()
        return time.perf_counter() - started
    finally:
        raw.close()


def ingest_vs_raw(store: Any, n: int, rounds: int) -> dict[str, Any]:
    from phalanx.domain import ExperimentStatus, Replica, Role

    cols = points_of(n, 16)
    stored = sum(len(c[1]) for c in cols)
    postgres = store.engine.dialect.name == "postgresql"
    cases = ("phalanx", "executemany", "copy") if postgres else ("phalanx", "executemany")
    rates: dict[str, list[float]] = {c: [] for c in cases}
    for r in range(rounds):
        for case in cases:  # A B C A B C
            if case == "phalanx":
                e = store.create_experiment(
                    name=f"copy-{r}", project="bench", replicas=[Replica("", "master", Role.MASTER, 0, 0)]
                )
                store.update_experiment(e.id, status=ExperimentStatus.RUNNING, started_at=time.time())
                seconds = store_points(store, e.id, cols, f"copy-{r}")
            else:
                seconds = raw_rows(store, cols, case, f"raw_{case}_{r}")
            rates[case].append(stored / seconds)
    out: dict[str, Any] = {"points": stored, "rounds": rounds}
    for case in cases:
        out[f"{case}_points_per_s"] = statistics.median(rates[case])
    for case in cases[1:]:
        per_round = [a / b for a, b in zip(rates["phalanx"], rates[case], strict=True)]
        out[f"phalanx_vs_{case}"] = statistics.median(per_round)
    return out


# --- part 2: the team -------------------------------------------------------------------------------


@dataclass
class Shipping:
    """What one rank's shipper holds: steps sent (acknowledged), its next seq, when it sends next."""

    due: float
    sent: int = 0
    seq: int = 0


def senders(
    port: int, ranks: list[tuple[str, int]], scalars: int, seconds: float, connections: int, out: Any
) -> None:
    """Every rank reports ``scalars`` scalars a second for ``seconds``, shipped as the SDK ships
    them, over ``connections`` keep-alive connections (runs in a process of its own)."""
    from phalanx.spool import encode_points

    start = time.time()
    state = {rank: Shipping(due=start + random.random() * SHIP_INTERVAL) for rank in ranks}
    posts: list[float] = []
    ages: list[float] = []
    acked = [0]
    lock = threading.Lock()
    keys = [("train", f"metric {k}") for k in range(scalars)]

    def work(mine: list[tuple[str, int]]) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        while True:
            now = time.time()
            if now - start >= seconds:
                break
            due = min(mine, key=lambda r: state[r].due)
            wait = state[due].due - now
            if wait > 0:
                time.sleep(min(wait, 0.05))
                continue
            experiment, rank = due
            s = state[due]
            steps = int(now - start)  # one step a second: steps sent so far .. now
            if steps <= s.sent:
                s.due = now + SHIP_INTERVAL
                continue
            points = [
                (title, series, step, 1.0 / (step + 1) + rank * 1e-3, start + step)
                for step in range(s.sent, steps)
                for title, series in keys
            ]
            record = {
                "stream": f"{experiment}-r{rank}",
                "seq": s.seq,
                "kind": "scalar",
                "experiment_id": experiment,
                "replica": f"worker-{rank}",
                "role": "worker",
                "index": rank,
                "rank": rank,
                "time": now,
                "data": encode_points(points),
            }
            body = json.dumps({"events": [record]}).encode()
            sent_at = time.time()
            try:
                conn.request("POST", "/api/v1/ingest", body, {"Content-Type": "application/json"})
                answer = conn.getresponse()
                answer.read()
                ok = answer.status == 200
            except (OSError, http.client.HTTPException):
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
                ok = False
            done = time.time()
            if ok:
                with lock:
                    posts.append(done - sent_at)
                    # the oldest point's age: step k's points exist once its second ends
                    ages.append(done - (start + s.sent + 1))
                    acked[0] += len(points)
                s.sent, s.seq = steps, s.seq + 1
            s.due = done + SHIP_INTERVAL
        conn.close()

    threads = [
        threading.Thread(target=work, args=(ranks[i::connections],), daemon=True)
        for i in range(min(connections, len(ranks)))
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.put({"posts": posts, "ages": ages, "acked": acked[0], "seconds": time.time() - start})


def start_server(home: Path, db_url: str) -> tuple[subprocess.Popen[bytes], int]:
    from phalanx.machine.ports import free_port

    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHALANX_")}
    env.update(PHALANX_HOME=str(home), PHALANX_DB_URL=db_url, PYTHONPATH=str(REPO / "src"))
    argv = [sys.executable, "-c", "from phalanx.cli.main import main; main()", "server"]
    proc = subprocess.Popen(
        [*argv, "--port", str(port), "--log-level", "warning"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 90
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/health", timeout=10):
                return proc, port
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise
            time.sleep(0.2)


def fetch(url: str) -> float:
    started = time.perf_counter()
    with urllib.request.urlopen(
        urllib.request.Request(url, headers={"Accept-Encoding": "gzip"}), timeout=120
    ) as r:
        r.read()
    return time.perf_counter() - started


def team(store: Any, home: Path, db_url: str, args: argparse.Namespace) -> dict[str, Any]:
    from phalanx.domain import ExperimentStatus, Replica, Role

    experiments = []
    for i in range(args.experiments):
        replicas = [Replica("", f"worker-{r}", Role.WORKER, r, r) for r in range(args.ranks)]
        e = store.create_experiment(name=f"team-{i}", project="bench", replicas=replicas)
        store.update_experiment(e.id, status=ExperimentStatus.RUNNING, started_at=time.time())
        experiments.append(e.id)
    before = table_bytes(store)
    proc, port = start_server(home, db_url)
    base = f"http://127.0.0.1:{port}/api/v1"
    try:
        ctx = multiprocessing.get_context("spawn")
        results = ctx.Queue()
        ranks = [(e, r) for e in experiments for r in range(args.ranks)]
        sending = ctx.Process(
            target=senders, args=(port, ranks, args.scalars, args.seconds, args.senders, results)
        )
        sending.start()
        lists: list[float] = []
        charts: list[float] = []
        loads: list[str] = []
        chart = f"{base}/experiments/{experiments[0]}/metrics/train?max_points=2000&format=compact"
        ends = time.monotonic() + args.seconds
        time.sleep(min(5.0, args.seconds / 4))  # the senders under way
        while time.monotonic() < ends - 1:
            lists.append(fetch(f"{base}/experiments?limit=50"))
            with contextlib.suppress(OSError):  # no point yet in a smoke run's first second
                charts.append(fetch(chart))
            loads.append(load())
            time.sleep(0.25)
        sent = results.get(timeout=args.seconds + 300)
        sending.join(60)
    finally:
        proc.terminate()
        proc.wait(60)
    size = table_bytes(store) - before
    acked = sent["acked"]
    offered = args.experiments * args.ranks * args.scalars
    return {
        "experiments": args.experiments,
        "ranks": args.ranks,
        "offered_points_per_s": offered,
        "sustained_points_per_s": acked / sent["seconds"],
        "points": acked,
        "posts": len(sent["posts"]),
        "post_p50_s": pct(sent["posts"], 0.5),
        "post_p99_s": pct(sent["posts"], 0.99),
        "age_p50_s": pct(sent["ages"], 0.5),
        "age_p99_s": pct(sent["ages"], 0.99),
        "bytes_per_point": size / acked if acked else math.nan,
        "list_p50_s": pct(lists, 0.5),
        "list_p99_s": pct(lists, 0.99),
        "chart_p50_s": pct(charts, 0.5),
        "chart_p99_s": pct(charts, 0.99),
        "load_during": loads[len(loads) // 2] if loads else load(),
    }


def report(copy: dict[str, Any], t: dict[str, Any], kind: str) -> None:
    print(f"1. {kind} ingest, {copy['points']:,} points, A B C x {copy['rounds']} (median points/s):")
    line = f"   phalanx store {copy['phalanx_points_per_s']:,.0f}"
    line += f" | raw executemany {copy['executemany_points_per_s']:,.0f}"
    if "copy_points_per_s" in copy:
        line += f" | raw COPY {copy['copy_points_per_s']:,.0f}"
    print(line)
    ratios = f"   phalanx / executemany {copy['phalanx_vs_executemany']:.2f}x"
    if "phalanx_vs_copy" in copy:
        ratios += f", phalanx / COPY {copy['phalanx_vs_copy']:.2f}x"
    print(ratios)
    print(
        f"2. team: {t['experiments']} experiments x {t['ranks']} ranks through the server into {kind}:"
        f" offered {t['offered_points_per_s']:,} points/s, sustained {t['sustained_points_per_s']:,.0f}"
        f" ({t['sustained_points_per_s'] / t['offered_points_per_s']:.0%}), {t['points']:,} points"
        f" in {t['posts']:,} POSTs"
    )
    print(
        f"   POST p50 {t['post_p50_s'] * 1000:.0f} ms p99 {t['post_p99_s'] * 1000:.0f} ms; a point stored"
        f" p50 {t['age_p50_s']:.2f} s p99 {t['age_p99_s']:.2f} s after it was reported"
    )
    print(f"   store: {t['bytes_per_point']:.1f} bytes per point (points, summary, series; indexes included)")
    print(
        f"   during it: list p50 {t['list_p50_s'] * 1000:.0f} ms p99 {t['list_p99_s'] * 1000:.0f} ms;"
        f" running chart (cold) p50 {t['chart_p50_s'] * 1000:.0f} ms p99 {t['chart_p99_s'] * 1000:.0f} ms;"
        f" load average {t['load_during']}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--experiments", type=int, default=100)
    parser.add_argument("--ranks", type=int, default=16)
    parser.add_argument("--scalars", type=int, default=10, help="scalars each rank reports a second")
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--senders", type=int, default=16, help="connections the ranks share")
    parser.add_argument("--copy-points", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3, help="A B C rounds of part 1")
    parser.add_argument("--db-url", help="an existing database (default: a PostgreSQL started here)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (figures mean nothing)")
    args = parser.parse_args()
    if args.smoke:
        args.experiments, args.ranks, args.scalars, args.seconds = 2, 2, 2, 4.0
        args.senders, args.copy_points, args.rounds = 2, 2000, 1
    from phalanx.config import Settings
    from phalanx.store import open_store

    print(f"load average before: {load()}")
    with (
        tempfile.TemporaryDirectory(prefix="phalanx-bench-scale-") as tmp,
        database(args.db_url, Path(tmp)) as url,
    ):
        home = Path(tmp)
        store: Any = open_store(Settings(home=home, db_url=url))
        kind = "PostgreSQL" if store.engine.dialect.name == "postgresql" else "SQLite"
        copy = ingest_vs_raw(store, args.copy_points, args.rounds)
        print(f"load average after part 1: {load()}")
        result = team(store, home, url, args)
        store.engine.dispose()
    print(f"load average after: {load()}")
    report(copy, result, kind)
    if args.json:
        args.json.write_text(json.dumps({"ingest": copy, "team": result, "database": kind}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
