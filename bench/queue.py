"""The queue's hand-over: how long a machine stays idle between one experiment's end and the next
one's start, through the queue versus a shell loop, in one run.

    .venv/bin/python bench/queue.py [--n 50] [--rounds 3] [--json FILE]

- queue: a blocker experiment holds every core; N trivial experiments (`echo done`, each asking for
  every core, so they can only run one at a time) are started with `phalanx run --detach` and wait
  in the queue; the blocker is released and the queue drains.
- loop: the same N experiments run back to back by `for i in $(seq N); do phalanx run -f ...; done`.

Gap = next experiment's started_at minus the previous one's finished_at, read from each run's store
(both times are written by the supervisors themselves). Median and p99 (nearest rank) over N - 1 gaps.
The modes alternate for ``--rounds`` rounds (each with its own temporary PHALANX_HOME).
Not run by the tests; figures are in README.md.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "phalanx.cli.main"]


def spec(folder: Path, name: str, cmd: str, cores: int) -> Path:
    path = folder / f"{name}.yml"
    path.write_text(
        "version: 1\nkind: experiment\n"
        f"environment:\n  resources:\n    cpu: {{limits: {cores}}}\n"
        f"run:\n  cmd: {json.dumps(cmd)}\n"
    )
    return path


def env_for(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHALANX_")}
    env["PHALANX_HOME"] = str(home)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "src"), os.environ.get("PYTHONPATH")) if p)
    return env


def times(home: Path, exclude: frozenset[str] | set[str] = frozenset()) -> list[tuple[float, float]]:
    sys.path.insert(0, str(REPO / "src"))
    from phalanx.config import Settings
    from phalanx.domain import ExperimentFilter
    from phalanx.store import open_store

    store = open_store(Settings(home=home))
    items = store.list_experiments(ExperimentFilter(limit=10_000)).items
    bad = [(e.id, e.status, e.reason) for e in items if str(e.status) != "succeeded"]
    if bad:
        raise SystemExit(f"some experiments did not succeed: {bad[:3]}")
    return sorted((e.started_at, e.finished_at) for e in items if e.id not in exclude)  # type: ignore[misc]


def gaps(spans: list[tuple[float, float]]) -> list[float]:
    return [b[0] - a[1] for a, b in itertools.pairwise(spans)]


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)]


def run_queue(n: int, work: Path, cores: int) -> list[float]:
    home = work / "queue-home"
    env = env_for(home)
    release = work / "release"
    blocker_spec = spec(
        work,
        "blocker",
        f"python -c \"import os, time\nwhile not os.path.exists('{release}'): time.sleep(0.05)\"",
        cores,
    )
    trivial = spec(work, "trivial", "echo done", cores)
    detach = [*CLI, "run", "--detach", "-f"]
    blocker = subprocess.run(
        [*detach, str(blocker_spec)], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    for i in range(n):
        subprocess.run([*detach, str(trivial)], env=env, capture_output=True, text=True, check=True)
        print(f"\rqueued {i + 1}/{n}", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    release.touch()
    deadline = time.monotonic() + 60 * n
    while time.monotonic() < deadline:
        cmd = [*CLI, "queue", "-o", "json"]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        doc = json.loads(out.stdout)
        if not doc["running"] and not doc["queued"]:
            break
        time.sleep(1)
    time.sleep(1)  # the last supervisor writes its end before it leaves the ledger; let it exit
    return gaps(times(home, exclude={blocker}))


def run_loop(n: int, work: Path, cores: int) -> list[float]:
    home = work / "loop-home"
    trivial = spec(work, "trivial", "echo done", cores)
    cli = " ".join(CLI)
    script = f'for i in $(seq {n}); do {cli} run -f "{trivial}" >/dev/null 2>&1 || exit 1; done'
    subprocess.run(["bash", "-c", script], env=env_for(home), check=True)
    return gaps(times(home))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3, help="queue/loop alternations (n split among them)")
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="tiny sizes, one round: the suite's check that the bench runs (its figures mean nothing)",
    )
    args = parser.parse_args()
    if args.smoke:
        args.n, args.rounds = 2, 1
    cores = len(os.sched_getaffinity(0))
    per_round = max(2, args.n // args.rounds)
    results: dict[str, Any] = {
        "n": per_round * args.rounds,
        "rounds": args.rounds,
        "cores": cores,
        "modes": {},
    }
    pooled: dict[str, list[float]] = {"queue": [], "loop": []}
    walls: dict[str, float] = {"queue": 0.0, "loop": 0.0}
    with tempfile.TemporaryDirectory(prefix="phalanx-bench-queue-") as tmp:
        # the modes alternate (queue loop queue loop ...), each round in fresh homes, so a load swing
        # on a shared machine touches both alike; the gaps of all rounds are pooled per mode
        for r in range(args.rounds):
            for mode, fn in (("queue", run_queue), ("loop", run_loop)):
                work = Path(tmp) / f"round-{r}-{mode}"
                work.mkdir()
                started = time.monotonic()
                pooled[mode] += fn(per_round, work, cores)
                walls[mode] += time.monotonic() - started
    for mode, values in pooled.items():
        results["modes"][mode] = {
            "median_s": statistics.median(values),
            "p99_s": p99(values),
            "min_s": min(values),
            "max_s": max(values),
            "wall_s": walls[mode],
        }
    load = os.getloadavg()
    results["load_average"] = load
    print(f"{results['n']} trivial experiments per mode, each asking for all {cores} cores (one at a time)")
    print(f"{'mode':<8}{'gap median s':>14}{'gap p99 s':>12}{'min':>8}{'max':>8}")
    for mode, res in results["modes"].items():
        print(
            f"{mode:<8}{res['median_s']:>14.3f}{res['p99_s']:>12.3f}{res['min_s']:>8.3f}{res['max_s']:>8.3f}"
        )
    ratio = results["modes"]["loop"]["median_s"] / results["modes"]["queue"]["median_s"]
    print(
        f"loop / queue median gap: {ratio:.1f}x ({args.rounds} alternating rounds; load average "
        f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on {os.cpu_count()} CPUs)"
    )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
