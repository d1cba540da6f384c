"""What sampling the replicas' process trees costs (phalanx.machine.sysmetrics), against their own CPU.

    python bench/system_metrics.py [--replicas 4] [--children 3] [--seconds 30] [--interval 5]

Starts ``--replicas`` trees (a busy parent with ``--children`` sleeping children each, like a
trainer and its DataLoader workers), then runs the supervisor's sampler thread over them for
``--seconds`` at ``--interval`` and reports: the sampler's CPU seconds (thread time of its looks),
as a share of one core and as a ratio to the CPU the replicas used meanwhile; and, from 200
back-to-back looks, the cost of one look (most of it is reading /proc once for the machine's process
table, so it grows with the number of processes on the machine, printed too). Figures in README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

import contextlib

from phalanx.machine import proctree
from phalanx.machine.sysmetrics import Sampler, SystemMetrics, Target

TREE = """
import subprocess, sys, time
kids = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"]) for _ in range({n})]
end = time.time() + 3600
while time.time() < end:
    sum(range(10000))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--replicas", type=int, default=4)
    ap.add_argument("--children", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--interval", type=float, default=5.0)
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="tiny sizes, one round: the suite's check that the bench runs (its figures mean nothing)",
    )
    args = ap.parse_args()
    if args.smoke:
        args.replicas, args.children, args.seconds, args.interval = 1, 1, 1.0, 0.5
    procs = [
        subprocess.Popen([sys.executable, "-c", TREE.format(n=args.children)]) for _ in range(args.replicas)
    ]
    try:
        time.sleep(2.0)  # let the children start
        targets = [Target(p.pid, f"r{i}") for i, p in enumerate(procs)]
        tree = proctree.children_map()

        def replicas_cpu() -> float:
            t = proctree.children_map()
            return sum(
                proctree.sample_tree([p.pid, *proctree.descendants(p.pid, t)], 0, with_pss=False).cpu_seconds
                for p in procs
            )

        with tempfile.TemporaryDirectory() as spool:
            metrics = SystemMetrics(spool, "bench", lambda: targets, args.interval)
            cpu0, wall0 = replicas_cpu(), time.monotonic()
            metrics.start()
            time.sleep(args.seconds)
            metrics.stop()
            wall, used = time.monotonic() - wall0, replicas_cpu() - cpu0
            cost = metrics.cost_seconds
        sampler = Sampler(with_gpu=False)
        t0 = time.thread_time()
        for _ in range(200):
            sampler.points(targets)
        per_look = (time.thread_time() - t0) / 200
        result = {
            "replicas": args.replicas,
            "processes_per_replica": 1 + args.children,
            "processes_on_machine": sum(len(v) for v in tree.values()),
            "interval_s": args.interval,
            "seconds": round(wall, 1),
            "sampler_cpu_s": round(cost, 4),
            "sampler_share_of_one_core_percent": round(100 * cost / wall, 4),
            "replicas_cpu_s": round(used, 2),
            "sampler_over_replicas_percent": round(100 * cost / used, 4) if used else None,
            "one_look_ms": round(per_look * 1000, 3),
            "share_of_one_core_at_interval_percent": round(100 * per_look / args.interval, 4),
            # one case, its ratio measured over the same seconds as the replicas' CPU: nothing to
            # alternate with; the load says how busy the machine was meanwhile
            "load_average": os.getloadavg(),
        }
        print(json.dumps(result, indent=2))
    finally:
        for p in procs:
            for pid in [*proctree.descendants(p.pid), p.pid]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, 9)
            p.wait()


if __name__ == "__main__":
    main()
