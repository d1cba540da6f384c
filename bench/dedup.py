"""The store's exactly-once bookkeeping on its own: many small events (one console line each).

    .venv/bin/python bench/dedup.py [--events 40000] [--batch 200] [--runs 5]

Writes the events in batches into a fresh SQLite store (new events), then writes them all again
(every one a duplicate, what a client re-sending after a lost answer costs), and prints events per
second of process CPU time (the median of ``--runs``; CPU time, not wall time, so that other load on
a shared machine moves it less). Compare two checkouts with PYTHONPATH=<checkout>/src.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from phalanx.domain import Event, EventKind
from phalanx.store.sql import SqlStore


def run(n: int, batch: int) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as d:
        store = SqlStore(f"sqlite:///{d}/bench.db")
        exp = store.create_experiment(name="dedup", project="bench").id
        line = {"lines": ["x"]}
        events = [Event(exp, EventKind.LOG, line, stream="s-1", seq=i, time=1.0) for i in range(n)]
        figures = []
        for _ in range(2):  # new, then all duplicates
            t0 = time.process_time()
            for i in range(0, n, batch):
                store.write_events(events[i : i + batch])
            figures.append(n / (time.process_time() - t0))
        store.close()
        return figures[0], figures[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=40_000)
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="tiny sizes, one round: the suite's check that the bench runs (its figures mean nothing)",
    )
    args = parser.parse_args()
    if args.smoke:
        args.events, args.batch, args.runs = 200, 50, 1
    results = [run(args.events, args.batch) for _ in range(args.runs)]
    new = statistics.median(r[0] for r in results)
    again = statistics.median(r[1] for r in results)
    print(f"new events/s: {new:,.0f}; re-sent events (all duplicates)/s: {again:,.0f}")
    # each run stores the new events, then re-sends them: the two cases alternate (A B A B ...)
    load = os.getloadavg()
    print(
        f"duplicates / new: {again / new:.2f}x (median of {args.runs} alternating runs; "
        f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on {os.cpu_count()} CPUs)"
    )


if __name__ == "__main__":
    main()
