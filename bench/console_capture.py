"""What capturing a chatty job's console costs: ``--lines`` lines printed bare and under `phalanx run`.

    .venv/bin/python bench/console_capture.py [--lines 200000] [--rounds 3] [--baseline-src DIR] [--smoke]

The job prints ``--lines`` lines of a training log (``step N loss ... lr ...``) and exits. Cases,
alternated each round (A B C, A B C, ...) so a load swing hits all alike, each a fresh process tree
measured in CPU-s (user + system of the command and everything it waited for):

- bare: ``python job.py``, its stdout to /dev/null (the anchor: nothing can capture for less);
- `phalanx run -f job.yml` in the foreground, its echo to /dev/null: the reaper copying the pipes to
  the replica's log, the supervisor following the log to the terminal and to the spool, the
  ingester storing every line; with ``--baseline-src``, the same of another tree (the one before a
  change), in the same rounds.

After each Phalanx run the bench counts the lines stored (`phalanx logs ID -o json`): every line
must be there (nothing reported is lost). The median CPU-s per case and its ratio to bare are
printed with the load average. Not run by the tests; the figures belong to the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

JOB = """\
import sys
n = int(sys.argv[1])
for i in range(n):
    print(f"step {i} loss 0.{i % 1000000:06d} lr 0.001 grad_norm 1.25 tokens/s 51234")
"""


def cpu_of(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    """CPU-s of ``argv`` and all it waited for, its stdout to /dev/null; raises if it failed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=900
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr[-2000:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def stored_lines(env: dict[str, str], cwd: Path) -> int:
    """Lines stored for the newest experiment of the home in ``env``."""
    cli = [sys.executable, "-m", "phalanx.cli.main"]
    listed = subprocess.run([*cli, "ls", "-o", "json"], env=env, cwd=cwd, capture_output=True, text=True)
    newest = max(json.loads(listed.stdout), key=lambda e: e["created_at"])
    logs = subprocess.run(
        [*cli, "logs", newest["id"], "-o", "json"], env=env, cwd=cwd, capture_output=True, text=True
    )
    return len(logs.stdout.splitlines())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline-src", type=Path, help="another tree's src/ to run beside this one")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--smoke", action="store_true", help="2,000 lines, one round: that it runs")
    args = parser.parse_args()
    if args.smoke:
        args.lines, args.rounds = 2_000, 1
    base = {k: v for k, v in os.environ.items() if not k.startswith("PHALANX_") and k != "PYTHONPATH"}
    with tempfile.TemporaryDirectory(prefix="phalanx-console-bench-") as tmp:
        work = Path(tmp)
        (work / "job.py").write_text(JOB)
        (work / "job.yml").write_text(
            f"version: 1\nkind: experiment\nrun:\n  cmd: python job.py {args.lines}\n"
        )
        run = [sys.executable, "-m", "phalanx.cli.main", "run", "-f", "job.yml"]
        cases: dict[str, tuple[list[str], str | None]] = {
            "bare python job.py": ([sys.executable, "job.py", str(args.lines)], None),
            "phalanx run -f job.yml": (run, str(REPO / "src")),
        }
        if args.baseline_src is not None:
            cases["phalanx run -f job.yml @baseline"] = (run, str(args.baseline_src.resolve()))
        spent: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(args.rounds):
            for name, (argv, src) in cases.items():
                env = dict(base)
                if src is not None:
                    home = work / f"home-{len(spent[name])}-{name.endswith('@baseline')}"
                    env |= {"PHALANX_HOME": str(home), "PYTHONPATH": src}
                spent[name].append(cpu_of(argv, env, work))
                if src is not None:
                    stored = stored_lines(env, work)
                    if stored != args.lines:
                        raise RuntimeError(f"{name}: {stored} of {args.lines} lines stored")
    bare = statistics.median(spent["bare python job.py"])
    load = os.getloadavg()
    print(f"{'case':<34} {'CPU-s (median)':>15} {'x bare':>8}   ({args.lines:,} lines, {args.rounds} rounds)")
    results: dict[str, Any] = {}
    for name, values in spent.items():
        median = statistics.median(values)
        results[name] = {"cpu_s": median, "ratio_to_bare": median / bare, "all": values}
        extra = (median - bare) / args.lines * 1e6
        per_line = "" if name.startswith("bare") else f"  (+{extra:.1f} µs a line, the run's start included)"
        print(f"{name:<34} {median:>15.3f} {median / bare:>7.1f}x{per_line}")
    print(f"all stored, {args.lines:,} lines; load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    if args.json:
        doc = {"cases": results, "lines": args.lines, "load_average": load}
        args.json.write_text(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
