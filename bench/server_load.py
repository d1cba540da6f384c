"""A server that stays quick: chart latency and bytes at any series length, and the list under chart load.

    .venv/bin/python bench/server_load.py [--points 1000000] [--series 8] [--clients 20] [--rounds 5]

A real `phalanx server` (uvicorn, one process) over the store bench/server.py fills ("big":
``--series`` x ``--points`` points; "small": the same series x 1,000). The cases alternate, A B C A B C,
so a swing of the machine's load falls on all of them alike:

- A: the small Scalars chart, B: the big one, C: a 1 % zoom window of the big one, each as the UI
  asks (``max_points=2000&format=compact``, gzip): p50 of each read cold (an ``x_max`` no earlier
  request had, so the cache of finished experiments' answers cannot serve it) and again (served
  from that cache), the cold ratios B/A, C/A; the bytes on the wire of the compact form against the
  JSON form (``format=json``) for B and C;
- the list (``/experiments?limit=50``) alone, then with ``--clients`` chart clients (in a process of
  their own, so their threads do not slow this one's clock) loading the big chart in a loop,
  alternating round by round: p50/p99 of each and the ratio, and how many chart reads a second
  the clients got meanwhile (a chart read steps aside for a waiting list: what that costs them).

The load average is printed before and after. Targets (issue #30): list p99 <= 150 ms with 20 chart
clients, chart p50 <= 50 ms at any series length, <= 100 KB per 8-series chart.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))


def _server_bench() -> Any:
    """bench/server.py (its store filling), loaded by path: bench/ is not a package."""
    spec = importlib.util.spec_from_file_location("bench_server", Path(__file__).with_name("server.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fetch(url: str, gzip: bool = True) -> tuple[float, int]:
    """Seconds and bytes on the wire (not inflated: a browser's cost, not this script's)."""
    headers = {"Accept-Encoding": "gzip"} if gzip else {}
    started = time.perf_counter()
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=60) as r:
        size = len(r.read())
    return time.perf_counter() - started, size


def chart_url(base: str, exp: str, form: str = "compact", window: str = "") -> str:
    return f"{base}/api/v1/experiments/{exp}/metrics/loss?max_points=2000&x=step&format={form}{window}"


def load_clients(url: str, clients: int, stop: Any, done: Any) -> None:
    """``clients`` threads loading ``url`` until ``stop`` is set (runs in its own process), counting
    the answered reads in ``done`` (what the list's priority costs the charts)."""

    def loop() -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError):
                fetch(url)
                with done.get_lock():
                    done.value += 1

    threads = [threading.Thread(target=loop, daemon=True) for _ in range(clients)]
    for t in threads:
        t.start()
    stop.wait()
    for t in threads:
        t.join(60)


def start_server(home: Path) -> tuple[subprocess.Popen[bytes], str]:
    from phalanx.machine.ports import free_port

    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHALANX_")}
    env.update(PHALANX_HOME=str(home), PYTHONPATH=str(REPO / "src"))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from phalanx.cli.main import main; main()",
            "server",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            fetch(f"{base}/api/v1/health")
            return proc, base
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise
            time.sleep(0.2)


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * q))]


def measure(base: str, big: str, small: str, args: argparse.Namespace) -> dict[str, Any]:
    lo = args.points // 2
    zoom = f"&x_min={lo}&x_max={lo + args.points // 100 - 1}"
    cases = {
        "A_small": chart_url(base, small),
        "B_big": chart_url(base, big),
        "C_zoom": chart_url(base, big, window=zoom),
    }
    # A cold read: the same points with an x_max no earlier answer had (past the last step by a
    # fraction), so the server's cache of finished experiments cannot answer it.
    last = {"A_small": 999, "B_big": args.points - 1, "C_zoom": lo + args.points // 100 - 1}
    fresh = iter(range(1, 1 << 30))

    def cold(name: str) -> str:
        url = cases[name] if name != "C_zoom" else chart_url(base, big, window=f"&x_min={lo}")
        return f"{url}&x_max={last[name] + next(fresh) * 1e-6}"

    for url in cases.values():
        fetch(url)  # warm
    times: dict[str, list[float]] = {f"{k}{kind}": [] for kind in ("_cold", "") for k in cases}
    for _ in range(args.rounds):
        for _ in range(args.repeat):
            for name in cases:  # A B C A B C, read cold
                times[f"{name}_cold"].append(fetch(cold(name))[0])
            for name, url in cases.items():  # and again, answered from the cache
                times[name].append(fetch(url)[0])
    sizes = {
        "B_big_compact_bytes": fetch(cases["B_big"])[1],
        "B_big_json_bytes": fetch(chart_url(base, big, "json"), gzip=False)[1],
        "C_zoom_compact_bytes": fetch(cases["C_zoom"])[1],
        "C_zoom_json_bytes": fetch(chart_url(base, big, "json", zoom), gzip=False)[1],
    }
    p50 = {k: statistics.median(v) for k, v in times.items()}

    idle: list[float] = []
    loaded: list[float] = []
    chart_rates: list[float] = []  # the chart clients' answered reads per second, during the lists
    list_url = f"{base}/api/v1/experiments?limit=50"
    ctx = multiprocessing.get_context("spawn")
    for _ in range(args.rounds):
        for _ in range(args.lists):
            idle.append(fetch(list_url)[0])
            time.sleep(0.02)
        stop = ctx.Event()
        done = ctx.Value("q", 0)
        clients = ctx.Process(
            target=load_clients, args=(cases["B_big"], args.clients, stop, done), daemon=True
        )
        clients.start()
        time.sleep(1.5)  # the clients' process started and busy
        started, before = time.monotonic(), done.value
        for _ in range(args.lists):
            loaded.append(fetch(list_url)[0])
            time.sleep(0.02)
        chart_rates.append((done.value - before) / (time.monotonic() - started))
        stop.set()
        clients.join(60)
        if clients.is_alive():
            clients.kill()
    return {
        "chart_p50_s": p50,
        "big_vs_small": p50["B_big_cold"] / p50["A_small_cold"],
        "zoom_vs_small": p50["C_zoom_cold"] / p50["A_small_cold"],
        **sizes,
        "list_idle_p50_s": pct(idle, 0.5),
        "list_idle_p99_s": pct(idle, 0.99),
        "list_loaded_p50_s": pct(loaded, 0.5),
        "list_loaded_p99_s": pct(loaded, 0.99),
        "chart_reads_per_s": statistics.median(chart_rates),
    }


def report(r: dict[str, Any], args: argparse.Namespace, load: tuple[float, ...]) -> bool:
    p50 = r["chart_p50_s"]
    print(f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; after: {r['load_after']}")
    print(f"chart p50 (compact, gzip), cases alternated A B C x {args.rounds * args.repeat}, cold | cached:")
    sizes = {"A_small": f"{args.series} x 1,000 points", "B_big": f"{args.series} x {args.points:,} points"}
    sizes["C_zoom"] = "1% zoom of B"
    for case, what in sizes.items():
        print(f"  {case[0]} {what:>26}: {p50[case + '_cold'] * 1000:7.1f} ms | {p50[case] * 1000:5.1f} ms")
    print(f"  cold B/A {r['big_vs_small']:.2f}x, C/A {r['zoom_vs_small']:.2f}x")
    for case in ("B_big", "C_zoom"):
        compact, full = r[f"{case}_compact_bytes"], r[f"{case}_json_bytes"]
        print(
            f"  {case}: {compact / 1000:.0f} KB compact vs {full / 1000:.0f} KB JSON "
            f"({full / compact:.1f}x smaller)"
        )
    ratio = r["list_loaded_p99_s"] / r["list_idle_p99_s"]
    print(
        f"list: idle p50 {r['list_idle_p50_s'] * 1000:.0f} ms p99 {r['list_idle_p99_s'] * 1000:.0f} ms; "
        f"with {args.clients} chart clients p50 {r['list_loaded_p50_s'] * 1000:.0f} ms "
        f"p99 {r['list_loaded_p99_s'] * 1000:.0f} ms ({ratio:.1f}x idle); the chart clients got "
        f"{r['chart_reads_per_s']:.0f} reads/s meanwhile"
    )
    ok = bool(
        r["list_loaded_p99_s"] <= 0.150
        and max(p50.values()) <= 0.050  # cold reads included
        and max(r["B_big_compact_bytes"], r["C_zoom_compact_bytes"]) <= 100_000 * args.series / 8
    )
    print(
        "targets met (list p99 <= 150 ms, chart p50 <= 50 ms, <= 100 KB / 8 series)"
        if ok
        else "TARGETS MISSED"
    )
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--points", type=int, default=1_000_000)
    parser.add_argument("--series", type=int, default=8)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=3, help="A B C repeats per round")
    parser.add_argument("--lists", type=int, default=40, help="list requests per round, idle and loaded each")
    parser.add_argument("--home", type=Path, help="keep the filled store here (reused when it exists)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one round (figures mean nothing)")
    args = parser.parse_args()
    if args.smoke:
        args.points, args.series, args.clients, args.rounds, args.repeat, args.lists = 2000, 2, 2, 1, 1, 3
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="phalanx-bench-load-") as tmp:
        home = args.home or Path(tmp)
        ids_file = home / "bench-ids.json"
        if ids_file.exists():
            big, small = json.loads(ids_file.read_text())
        else:
            big, small = _server_bench().fill(home, args.series, args.points)
            ids_file.write_text(json.dumps([big, small]))
        proc, base = start_server(home)
        try:
            result = measure(base, big, small, args)
        finally:
            proc.terminate()
            proc.wait(30)
    result["load_before"] = load
    result["load_after"] = " ".join(f"{v:.2f}" for v in os.getloadavg())
    ok = report(result, args, load)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0 if ok or args.smoke else 1


if __name__ == "__main__":
    raise SystemExit(main())
