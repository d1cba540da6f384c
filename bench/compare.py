"""Compare at 100 runs against a light page, in a real browser.

    .venv/bin/python bench/compare.py [--runs 100] [--points 300] [--rounds 3] [--json FILE]

A real `phalanx server` over a temp PHALANX_HOME holding ``--runs`` finished runs (two ranks each,
four training titles and three system titles of ``--points`` points per series:
tests/e2e/many_runs.py). Debian's chromium (Playwright) opens, in alternating rounds, the light page
(one run's Scalars tab: the same charts for one run) and Compare of every run, each until every
training chart is drawn, and counts the API requests each made. Target (issue 40): Compare of 100
runs within 2x the light page (12 runs took 5.4x, with 143 requests, before).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# not bench/ itself first: bench/queue.py would stand in for the standard library's queue
sys.path[:1] = [str(REPO / "src"), str(REPO)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--points", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, to check the bench runs")
    args = parser.parse_args()
    if args.smoke:
        args.runs, args.points, args.rounds = 3, 20, 1
    from playwright.sync_api import sync_playwright
    from tests.e2e.conftest import CHROMIUM, CHROMIUM_ARGS
    from tests.e2e.many_runs import TARGET, fill_runs, measure
    from tests.integration.server.serverproc import start_server, stop_server

    with tempfile.TemporaryDirectory(prefix="phalanx-bench-compare-") as tmp:
        home = Path(tmp)
        ids = fill_runs(home, args.runs, args.points)
        server = start_server(home)
        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
                found = measure(browser, server.url, ids, args.rounds)
                browser.close()
        finally:
            stop_server(server.proc)
    load = os.getloadavg()[0]
    print(f"{args.runs} runs, {args.points} points per series, {args.rounds} rounds, load average {load:.1f}")
    for name, times, asked in (
        ("light page (one run's Scalars)", found.light, found.light_requests),
        (f"Compare of {args.runs} runs", found.compare, found.compare_requests),
    ):
        shown = ", ".join(f"{t:.2f}" for t in times)
        print(f"  {name:34} {shown} s  ({asked} API requests)")
    verdict = "met" if found.ratio <= TARGET else "NOT met"
    print(f"  ratio (median of rounds): {found.ratio:.2f}x; target <= {TARGET:g}x {verdict}")
    if args.json:
        doc = {
            "runs": args.runs,
            "points": args.points,
            "light_s": found.light,
            "compare_s": found.compare,
            "light_requests": found.light_requests,
            "compare_requests": found.compare_requests,
            "ratio": found.ratio,
            "load": load,
        }
        args.json.write_text(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
