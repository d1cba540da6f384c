"""What a user's `pip install phalanx` costs: the venv's size on disk, its packages, and how long
`phalanx --help` takes in it (median of interleaved runs, so a busy machine hits both venvs alike).

    python bench/install.py VENV [VENV ...]            # venvs made with `pip install .`
    python bench/install.py --repeat 9 /tmp/before /tmp/after

Size counts every file under the venv (du -sb, bytes of content, not disk blocks), so a before/after
comparison shows what the declared dependencies pull in. Figures are in README.md ("Install").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path


def size_mb(venv: Path) -> float:
    out = subprocess.run(["du", "-sb", str(venv)], capture_output=True, text=True, check=True).stdout
    return int(out.split()[0]) / 1e6


def packages(venv: Path) -> list[str]:
    out = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-m",
            "pip",
            "list",
            "--format",
            "json",
            "--disable-pip-version-check",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return sorted(p["name"].lower() for p in json.loads(out))


def help_seconds(venv: Path) -> float:
    started = time.perf_counter()
    subprocess.run([str(venv / "bin" / "phalanx"), "--help"], capture_output=True, check=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("venvs", nargs="*", type=Path, help="default: the venv running this script")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="tiny sizes, one round: the suite's check that the bench runs (its figures mean nothing)",
    )
    args = parser.parse_args()
    args.venvs = args.venvs or [Path(sys.prefix)]
    if args.smoke:
        args.repeat = 1
    for venv in args.venvs:
        help_seconds(venv)  # warm the page cache: the first run reads every .pyc from disk
    times: dict[Path, list[float]] = {v: [] for v in args.venvs}
    for _ in range(args.repeat):
        for venv in args.venvs:
            times[venv].append(help_seconds(venv))
    print("| venv | size MB | packages | `phalanx --help` median s | min | max |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for venv in args.venvs:
        t = times[venv]
        print(
            f"| {venv} | {size_mb(venv):.0f} | {len(packages(venv))} | {statistics.median(t):.3f} "
            f"| {min(t):.3f} | {max(t):.3f} |"
        )
    first = statistics.median(times[args.venvs[0]])
    for venv in args.venvs[1:]:
        print(f"{venv} / {args.venvs[0]}: {statistics.median(times[venv]) / first:.2f}x")
    load = os.getloadavg()
    print(f"(venvs alternate, {args.repeat} rounds; load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f})")
    heavy = ("kubernetes", "kubernetes-validate", "matplotlib", "psycopg", "psycopg-binary")
    for venv in args.venvs:
        present = [p for p in packages(venv) if p in heavy]
        print(f"{venv}: heavy extras installed: {', '.join(present) or 'none'}")


if __name__ == "__main__":
    main()
