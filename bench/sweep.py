"""What pruning saves, and what the group controller costs per trial.

    .venv/bin/python bench/sweep.py [--trials 8] [--steps 30] [--json figures.json]

The same grid search (``--trials`` values of x, 2 at a time, seed fixed) runs twice on this machine:
once with successive-halving pruning, once without. Every trial is a real two-replica experiment
(master + worker, `phalanx run --detach`) whose rank 0 reports ``loss = x + 1/step`` every 0.1 s for
``--steps`` steps (a learning curve, not training: the figures are about the controller, not a model).

Printed: replica-seconds used (the sum over every replica of its run time: the compute a cluster
would bill), wall time, trials pruned and the best loss reached, for each run; and the controller's
overhead per trial: from a trial's end in the store to the controller noticing it, and from a free
slot to the next trial's experiment existing and to its replicas running (the launch: the Runner
starts the trial's supervisor, one process, from the spec object); and the slot's whole idle time,
from the replica exit that freed it to the next trial's first replica running, both as the store
recorded them (issue 42's figure: it includes the supervisor's teardown and the controller's notice).

Each search runs twice, alternated (A B A B): A, as before this change: each trial's supervisor
is a new `python -m phalanx.runner` (an interpreter start-up and every import) and the controller
polls every 0.3 s; B, the supervisor is forked from the controller (no start-up) and the controller
wakes the moment a trial's end is recorded (the group's wake FIFO) or a supervisor exits (pidfd).
The load average is printed with the figures (this machine is shared).
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


def one(home: Path, folder: Path, trials: int, steps: int, pruning: bool, wake: bool) -> dict[str, Any]:
    os.environ["PHALANX_HOME"] = str(home)
    from phalanx.config import Settings
    from phalanx.groups import controller, records
    from phalanx.spec.group import load_group
    from phalanx.store import open_store

    settings = Settings(home=home)
    store = open_store(settings)
    path = folder / ("pruned.yml" if pruning else "full.yml")
    path.write_text(group_text(trials, steps, pruning))
    group = controller.create(store, load_group(path), workdir=folder)
    started = time.monotonic()
    ctl = controller.Controller(store, settings, group.id)
    ctl.waker.enabled = wake
    ctl.fork_trials = wake
    done = ctl.run(handle_signals=False)
    wall = time.monotonic() - started
    trials_done = store.list_trials(done.id)
    replica_seconds = 0.0
    for t in trials_done:
        for r in store.list_replicas(t.experiment_id):
            if r.started_at and r.finished_at:
                replica_seconds += r.finished_at - r.started_at
    best = records.best_trial(trials_done, done.optimization)
    running: list[float] = []  # slot free -> the next trial's first replica running
    spans: list[tuple[float, float]] = []  # each trial's first replica start, last replica exit
    for t in trials_done:
        freed = ctl.freed_wall.get(t.number)
        replicas = store.list_replicas(t.experiment_id)
        starts = [r.started_at for r in replicas if r.started_at]
        if freed is not None and starts:
            running.append(max(0.0, min(starts) - freed))
        ends = [r.finished_at for r in replicas if r.finished_at]
        if starts and ends:
            spans.append((min(starts), max(ends)))
    return {
        "pruning": pruning,
        "wake": wake,
        "status": done.status,
        "trials": len(trials_done),
        "pruned": sum(t.state == "pruned" for t in trials_done),
        "replica_seconds": round(replica_seconds, 1),
        "wall_seconds": round(wall, 1),
        "best_loss": None if best is None else round(best.value or 0.0, 4),
        "best_x": None if best is None else best.params["x"],
        "launch_seconds": [round(s, 2) for s in ctl.launch_seconds],
        "notice_seconds": [round(s, 3) for s in ctl.notice_seconds],
        "running_seconds": [round(s, 2) for s in running],
        "idle_seconds": [round(s, 3) for s in slot_idle(spans, concurrency=2)],
    }


def slot_idle(spans: list[tuple[float, float]], concurrency: int) -> list[float]:
    """For every trial after the first ``concurrency``: from the replica exit that freed its slot
    (the slots freed first are filled first) to its own first replica running, as the store recorded
    both: the time a slot stood idle, whatever the controller's own clocks say."""
    exits = sorted(end for _, end in spans)
    idle = []
    for i, (start, _) in enumerate(sorted(spans)[concurrency:]):
        if i < len(exits) and exits[i] <= start:
            idle.append(start - exits[i])
    return idle


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="tiny sizes, one round: the suite's check that the bench runs (its figures mean nothing)",
    )
    args = parser.parse_args()
    if args.smoke:
        args.trials, args.steps = 2, 3
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="phalanx-bench-sweep-") as tmp:
        folder = Path(tmp) / "work"
        folder.mkdir()
        (folder / "train.py").write_text(TRAIN)
        load_before = os.getloadavg()
        for pruning in (True, False):
            for wake in (False, True):  # A B A B: poll, wake-up, poll, wake-up
                name = f"{'pruned' if pruning else 'full'}-{'wake' if wake else 'poll'}"
                result = one(Path(tmp) / f"home-{name}", folder, args.trials, args.steps, pruning, wake)
                runs.append(result)
                print(json.dumps(result), file=sys.stderr)
        load_after = os.getloadavg()
    by = {(r["pruning"], r["wake"]): r for r in runs}
    cpus = os.cpu_count()
    print(f"load average (1 min) before {load_before[0]:.1f}, after {load_after[0]:.1f}; {cpus} CPUs")
    print(f"{'run':<18} {'trials':>6} {'pruned':>6} {'replica-s':>10} {'wall s':>7} {'best loss':>10}")
    for (pruning, wake), r in sorted(by.items(), reverse=True):
        name = f"{'pruning' if pruning else 'no pruning'}, {'B' if wake else 'A'}"
        print(
            f"{name:<18} {r['trials']:>6} {r['pruned']:>6} {r['replica_seconds']:>10.1f} "
            f"{r['wall_seconds']:>7.1f} {r['best_loss']:>10}"
        )
    pruned, full = by[(True, True)], by[(False, True)]
    saved = 1 - pruned["replica_seconds"] / full["replica_seconds"] if full["replica_seconds"] else 0.0
    print(f"compute saved by pruning: {saved:.0%}; same best: {pruned['best_x'] == full['best_x']}")
    for wake in (False, True):
        launches = [s for r in runs if r["wake"] is wake for s in r["launch_seconds"]]
        notices = [s for r in runs if r["wake"] is wake for s in r["notice_seconds"]]
        running = [s for r in runs if r["wake"] is wake for s in r["running_seconds"]]
        idle = [s for r in runs if r["wake"] is wake for s in r["idle_seconds"]]
        if not launches or not notices:
            continue
        if idle:
            print(
                f"{'B' if wake else 'A'}: slot idle from a replica's exit to the next trial's first "
                f"replica {statistics.median(idle):.2f} s (median of {len(idle)}; max {max(idle):.2f})"
            )
        print(
            f"{'B: forked, woken' if wake else 'A: new interpreter, 0.3 s poll'}: "
            f"end noticed after {statistics.median(notices):.3f} s (median; max {max(notices):.3f}), "
            f"next trial's experiment created {statistics.median(launches):.2f} s after the slot freed, "
            f"its replicas running after {statistics.median(running) if running else float('nan'):.2f} s "
            f"(median of {len(launches)}; max {max(running) if running else float('nan'):.2f})"
        )
    if args.json:
        args.json.write_text(json.dumps({"runs": runs, "compute_saved": saved}, indent=2))


if __name__ == "__main__":
    main()
