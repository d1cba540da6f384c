"""Launch overhead: the same trivial DDP job (2 processes, or ``--ranks N``) started three ways, in one run.

    .venv/bin/python bench/launch.py [--repeat 5] [--ranks 2] [--json FILE]

- `phalanx run -f job.yml`   (a temp PHALANX_HOME: store, spool, supervisor, ingest, logs)
- `torchrun --standalone --nproc_per_node=N job.py`   (the anchor users know)
- a bare launcher that only sets MASTER_ADDR/PORT, RANK, WORLD_SIZE, LOCAL_RANK and starts the N
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
import resource
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
    n_workers: {workers}
run:
  cmd: python job.py
"""

# The limit: the least a launcher can do (stdlib only, so its own start-up costs ~20 ms).
BARE = """\
import os, socket, subprocess, sys
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
procs, n = [], int(sys.argv[1])
for rank in range(n):
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
               WORLD_SIZE=str(n), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(n))
    procs.append(subprocess.Popen([sys.executable, "job.py"], env=env))
sys.exit(max(p.wait() for p in procs))
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def timed(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """Wall time and CPU time (user + system, the launcher and every process it waited for) of one
    command; a failing run aborts the bench (no silent zeros). CPU time barely moves with the load
    of a shared machine, so it shows what each launcher costs even when wall times are noisy."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    out = subprocess.PIPE
    proc = subprocess.run(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=300)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        tail = proc.stdout.decode(errors="replace")[-3000:]
        sys.exit(f"bench: {' '.join(argv)} exited {proc.returncode}:\n{tail}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed, cpu


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=5, help="runs of each launcher (default 5)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--ranks", type=int, default=2, help="processes of the job (default 2)")
    parser.add_argument("--without-phalanx", action="store_true", help="only the two anchors (debugging)")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="tiny sizes, one round: the suite's check that the bench runs (its figures mean nothing)",
    )
    args = parser.parse_args()
    if args.smoke:
        args.repeat = 1

    phalanx, torchrun = BIN / "phalanx", BIN / "torchrun"
    for tool in (phalanx, torchrun):
        if not tool.exists():
            sys.exit(f"bench: {tool} not found; run `make venv` first")

    work = Path(tempfile.mkdtemp(prefix="phalanx-bench-launch-"))
    try:
        (work / "job.py").write_text(JOB)
        (work / "job.yml").write_text(POLYAXONFILE.format(workers=args.ranks - 1))
        (work / "bare.py").write_text(BARE)
        home = work / "home"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PHALANX_", "OMP_", "MASTER_"))}
        env.update(PHALANX_HOME=str(home), OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
        launchers: dict[str, list[str]] = {
            "bare": [sys.executable, "bare.py", str(args.ranks)],
            "torchrun": [str(torchrun), "--standalone", f"--nproc_per_node={args.ranks}", "job.py"],
            "phalanx run": [
                str(phalanx),
                "run",
                "-f",
                "job.yml",
                *(["--oversubscribe"] if args.ranks > 2 else []),
            ],
        }
        if args.without_phalanx:
            del launchers["phalanx run"]
        # One untimed run of each: page cache, .pyc files, the store's first migration.
        for argv in launchers.values() if not args.smoke else ():
            timed(argv, work, env)
        launchers["phalanx --help"] = [str(phalanx), "--help"]
        wall: dict[str, list[float]] = {name: [] for name in launchers}
        cpu: dict[str, list[float]] = {name: [] for name in launchers}
        for _ in range(args.repeat):
            for name, argv in launchers.items():
                w, c = timed(argv, work, env)
                wall[name].append(w)
                cpu[name].append(c)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    report(wall, cpu, args.repeat, args.ranks)
    if args.json:
        figures = {
            "repeat": args.repeat,
            "ranks": args.ranks,
            "cpus": os.cpu_count(),
            "load_average": os.getloadavg(),
            "wall_median_s": {k: statistics.median(v) for k, v in wall.items()},
            "cpu_median_s": {k: statistics.median(v) for k, v in cpu.items()},
            "wall_s": wall,
            "cpu_s": cpu,
        }
        args.json.write_text(json.dumps(figures, indent=2))


def report(wall: dict[str, list[float]], cpu: dict[str, list[float]], repeat: int, ranks: int) -> None:
    med = {k: statistics.median(v) for k, v in wall.items()}
    cpu_med = {k: statistics.median(v) for k, v in cpu.items()}
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"launch overhead: trivial {ranks}-process gloo DDP job, median of {repeat} interleaved runs, "
        f"{os.cpu_count()} CPUs, load average {load}"
    )
    head = f"{'launcher':<16}{'wall s':>8}{'min':>7}{'max':>7}{'vs torchrun':>13}{'vs bare':>9}"
    print(f"{head}{'cpu s':>8}{'vs bare':>9}")
    for name in ("bare", "torchrun", "phalanx run"):
        if name not in med:
            continue
        m, c = med[name], cpu_med[name]
        print(
            f"{name:<16}{m:>8.2f}{min(wall[name]):>7.2f}{max(wall[name]):>7.2f}"
            f"{m / med['torchrun']:>12.2f}x{m / med['bare']:>8.2f}x{c:>8.2f}{c / cpu_med['bare']:>8.2f}x"
        )
    if "phalanx run" in med:
        # Paired by round: each round's runs follow each other, so they saw about the same load.
        extra = statistics.median(p - b for p, b in zip(wall["phalanx run"], wall["bare"], strict=True))
        extra_cpu = statistics.median(p - b for p, b in zip(cpu["phalanx run"], cpu["bare"], strict=True))
        print(f"phalanx run - bare, paired by round (median): {extra:+.2f} s wall, {extra_cpu:+.2f} s cpu")
    help_s, helps = med["phalanx --help"], wall["phalanx --help"]
    print(f"{'phalanx --help':<16}{help_s:>8.3f}{min(helps):>7.3f}{max(helps):>7.3f}")
    if "phalanx run" in med:
        ratio = med["phalanx run"] / med["bare"]
        verdict = "meets" if ratio <= 1.1 else "MISSES"
        print(f"phalanx run is {ratio:.2f}x the bare launcher (wall): {verdict} the 1.1x target")
    print(f"phalanx --help {help_s:.3f} s: {'meets' if help_s < 0.3 else 'MISSES'} the 0.3 s target")


if __name__ == "__main__":
    main()
