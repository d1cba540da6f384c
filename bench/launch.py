"""Launch overhead: the same trivial 2-process DDP job started three ways, in one run.

    .venv/bin/python bench/launch.py [--repeat 5] [--json FILE]

- `phalanx run -f job.yml`   (a temp PHALANX_HOME: store, spool, supervisor, ingest, logs)
- `torchrun --standalone --nproc_per_node=2 job.py`   (the anchor users know)
- a bare launcher that only sets MASTER_ADDR/PORT, RANK, WORLD_SIZE, LOCAL_RANK and starts the two
  processes (the limit: nothing can start the job faster)

The job: init_process_group("gloo"), one all_reduce, barrier, destroy. Runs are interleaved (one of
each per round) so drift in a shared machine's load hits all three alike; the table shows medians and
ratios against torchrun and against bare. Also the time of `phalanx --help`. Not run by the tests:
`make bench` runs it. The figures belong to the machine that measured them; compare ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

JOB = """\
import os
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.ones(4) * (dist.get_rank() + 1)
dist.all_reduce(t)
assert float(t[0]) == sum(range(1, dist.get_world_size() + 1)), t
dist.barrier()
dist.destroy_process_group()
"""

POLYAXONFILE = """\
version: 1
kind: experiment
name: bench-launch
framework: pytorch
environment:
  replicas:
    n_workers: 1
run:
  cmd: python job.py
"""

# The limit: the least a launcher can do (stdlib only, so its own start-up costs ~20 ms).
BARE = """\
import os, socket, subprocess, sys
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
procs = []
for rank in range(2):
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
               WORLD_SIZE="2", LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="2")
    procs.append(subprocess.Popen([sys.executable, "job.py"], env=env))
sys.exit(max(p.wait() for p in procs))
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def timed(argv: list[str], cwd: Path, env: dict[str, str]) -> float:
    """Wall time of one command, from fork to exit; a failing run aborts the bench (no silent zeros)."""
    start = time.perf_counter()
    proc = subprocess.run(
        argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300
    )
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        tail = proc.stdout.decode(errors="replace")[-3000:]
        sys.exit(f"bench: {' '.join(argv)} exited {proc.returncode}:\n{tail}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=5, help="runs of each launcher (default 5)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--without-phalanx", action="store_true", help="only the two anchors (debugging)")
    args = parser.parse_args()

    phalanx, torchrun = BIN / "phalanx", BIN / "torchrun"
    for tool in (phalanx, torchrun):
        if not tool.exists():
            sys.exit(f"bench: {tool} not found; run `make venv` first")

    work = Path(tempfile.mkdtemp(prefix="phalanx-bench-launch-"))
    try:
        (work / "job.py").write_text(JOB)
        (work / "job.yml").write_text(POLYAXONFILE)
        (work / "bare.py").write_text(BARE)
        home = work / "home"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PHALANX_", "OMP_", "MASTER_"))}
        env.update(PHALANX_HOME=str(home), OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
        launchers: dict[str, list[str]] = {
            "bare": [sys.executable, "bare.py"],
            "torchrun": [str(torchrun), "--standalone", "--nproc_per_node=2", "job.py"],
            "phalanx run": [str(phalanx), "run", "-f", "job.yml"],
        }
        if args.without_phalanx:
            del launchers["phalanx run"]
        # One untimed run of each: page cache, .pyc files, the store's first migration.
        for argv in launchers.values():
            timed(argv, work, env)
        times: dict[str, list[float]] = {name: [] for name in launchers}
        times["phalanx --help"] = []
        for _ in range(args.repeat):
            for name, argv in launchers.items():
                times[name].append(timed(argv, work, env))
            times["phalanx --help"].append(timed([str(phalanx), "--help"], work, env))
        if args.without_phalanx:
            times["phalanx run"] = [float("nan")]
    finally:
        shutil.rmtree(work, ignore_errors=True)

    medians = {name: statistics.median(values) for name, values in times.items()}
    report(medians, times, args.repeat)
    if args.json:
        args.json.write_text(
            json.dumps({"repeat": args.repeat, "median_s": medians, "runs_s": times}, indent=2)
        )


def report(medians: dict[str, float], times: dict[str, list[float]], repeat: int) -> None:
    bare, torchrun = medians["bare"], medians["torchrun"]
    cpus = os.cpu_count()
    print(f"launch overhead: trivial 2-process gloo DDP job, median of {repeat} runs, {cpus} CPUs")
    print(f"{'launcher':<16}{'median s':>10}{'min s':>9}{'max s':>9}{'vs torchrun':>13}{'vs bare':>9}")
    for name in ("bare", "torchrun", "phalanx run"):
        m = medians[name]
        print(
            f"{name:<16}{m:>10.2f}{min(times[name]):>9.2f}{max(times[name]):>9.2f}"
            f"{m / torchrun:>12.2f}x{m / bare:>8.2f}x"
        )
    help_s = medians["phalanx --help"]
    print(f"{'phalanx --help':<16}{help_s:>10.3f}{min(times['phalanx --help']):>9.3f}")
    ratio = medians["phalanx run"] / bare
    verdict = "meets" if ratio <= 1.1 else "MISSES"
    print(f"phalanx run is {ratio:.2f}x the bare launcher: {verdict} the 1.1x target")
    print(f"phalanx --help {help_s:.3f} s: {'meets' if help_s < 0.3 else 'MISSES'} the 0.3 s target")


if __name__ == "__main__":
    main()
