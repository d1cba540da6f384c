"""What pruning saves, and what the group controller costs per trial.

    .venv/bin/python bench/sweep.py [--trials 8] [--steps 30] [--json figures.json]

The same grid search (``--trials`` values of x, 2 at a time, seed fixed) runs twice on this machine:
once with successive-halving pruning, once without. Every trial is a real two-replica experiment
(master + worker, `phalanx run --detach`) whose rank 0 reports ``loss = x + 1/step`` every 0.1 s for
``--steps`` steps (a learning curve, not training: the figures are about the controller, not a model).

Printed: replica-seconds used (the sum over every replica of its run time: the compute a cluster
would bill), wall time, trials pruned and the best loss reached, for each run; and the controller's
overhead per trial: from a trial's end in the store to the controller noticing it, and from a free
slot to the next trial's experiment existing (the launch through `phalanx run --detach`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TRAIN = """\
import os, sys, time
from phalanx import log_metrics
x, steps = float(sys.argv[1]), int(sys.argv[2])
for step in range(1, steps + 1):
    if os.environ.get("RANK", "0") == "0":
        log_metrics(step=step, loss=x + 1.0 / step)
    time.sleep(0.1)
"""


def group_text(trials: int, steps: int, pruning: bool) -> str:
    values = ", ".join(f"{0.1 * (i + 1):.1f}" for i in range(trials))
    prune = "  pruning: {kind: successive_halving, min_resource: 3, reduction_factor: 2}\n" if pruning else ""
    return (
        "version: 1\nkind: group\nname: bench\nframework: pytorch\n"
        "environment:\n  replicas: {n_workers: 1}\n"
        "hptuning:\n  concurrency: 2\n  grid_search: {}\n  seed: 11\n"
        "  metric: {name: loss, optimization: minimize}\n"
        f"{prune}  matrix:\n    x: {{values: [{values}]}}\n"
        f"run:\n  cmd: python train.py {{{{ x }}}} {steps}\n"
    )


def one(home: Path, folder: Path, trials: int, steps: int, pruning: bool) -> dict[str, Any]:
    os.environ["PHALANX_HOME"] = str(home)
    from phalanx.config import Settings
    from phalanx.groups import controller, records
    from phalanx.spec.group import load_group
    from phalanx.store import open_store
    from phalanx.store.base import group_store

    settings = Settings(home=home)
    store = group_store(open_store(settings))
    path = folder / ("pruned.yml" if pruning else "full.yml")
    path.write_text(group_text(trials, steps, pruning))
    group = controller.create(store, load_group(path), workdir=folder)
    started = time.monotonic()
    ctl = controller.Controller(store, settings, group.id)
    done = ctl.run(handle_signals=False)
    wall = time.monotonic() - started
    trials_done = store.list_trials(done.id)
    replica_seconds = 0.0
    for t in trials_done:
        for r in store.list_replicas(t.experiment_id):
            if r.started_at and r.finished_at:
                replica_seconds += r.finished_at - r.started_at
    best = records.best_trial(trials_done, done.optimization)
    return {
        "pruning": pruning,
        "status": done.status,
        "trials": len(trials_done),
        "pruned": sum(t.state == "pruned" for t in trials_done),
        "replica_seconds": round(replica_seconds, 1),
        "wall_seconds": round(wall, 1),
        "best_loss": None if best is None else round(best.value or 0.0, 4),
        "best_x": None if best is None else best.params["x"],
        "launch_seconds": [round(s, 2) for s in ctl.launch_seconds],
        "notice_seconds": [round(s, 2) for s in ctl.notice_seconds],
    }


def _merged(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One mode over the rounds: the median of each number, lists joined, other values the first's."""
    out = dict(runs[0])
    for key, value in runs[0].items():
        if isinstance(value, list):
            out[key] = [x for r in runs for x in r[key]]
        elif isinstance(value, int | float) and not isinstance(value, bool):
            out[key] = statistics.median(r[key] for r in runs)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--rounds", type=int, default=2, help="pruning/no-pruning alternations")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="tiny sizes, one round: the suite's check that the bench runs (its figures mean nothing)",
    )
    args = parser.parse_args()
    if args.smoke:
        args.trials, args.steps, args.rounds = 2, 3, 1
    by_mode: dict[bool, list[dict[str, Any]]] = {True: [], False: []}
    with tempfile.TemporaryDirectory(prefix="phalanx-bench-sweep-") as tmp:
        folder = Path(tmp) / "work"
        folder.mkdir()
        (folder / "train.py").write_text(TRAIN)
        # pruning, no pruning, pruning, ...: a load swing on a shared machine touches both alike
        for round_no in range(args.rounds):
            for pruning in (True, False):
                result = one(
                    Path(tmp) / f"home-{'pruned' if pruning else 'full'}-{round_no}",
                    folder,
                    args.trials,
                    args.steps,
                    pruning,
                )
                by_mode[pruning].append(result)
                print(json.dumps(result), file=sys.stderr)
    runs = [_merged(by_mode[True]), _merged(by_mode[False])]
    pruned, full = runs
    print(f"{'run':<12} {'trials':>6} {'pruned':>6} {'replica-s':>10} {'wall s':>7} {'best loss':>10}")
    for name, r in (("pruning", pruned), ("no pruning", full)):
        print(
            f"{name:<12} {r['trials']:>6} {r['pruned']:>6} {r['replica_seconds']:>10.1f} "
            f"{r['wall_seconds']:>7.1f} {r['best_loss']:>10}"
        )
    saved = 1 - pruned["replica_seconds"] / full["replica_seconds"] if full["replica_seconds"] else 0.0
    print(f"compute saved by pruning: {saved:.0%}; same best: {pruned['best_x'] == full['best_x']}")
    launches = pruned["launch_seconds"] + full["launch_seconds"]
    notices = pruned["notice_seconds"] + full["notice_seconds"]
    if launches:
        print(
            f"controller overhead per trial: end noticed after {statistics.median(notices):.2f} s (median), "
            f"next trial's experiment created {statistics.median(launches):.2f} s after the slot freed "
            f"(median of {len(launches)}; min {min(launches):.2f}, max {max(launches):.2f})"
        )
    load = os.getloadavg()
    print(f"({args.rounds} alternating rounds; load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f})")
    if args.json:
        args.json.write_text(json.dumps({"runs": runs, "compute_saved": saved}, indent=2))


if __name__ == "__main__":
    main()
