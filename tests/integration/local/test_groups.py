"""Experiment groups on real processes: every trial is a two-replica experiment started by
`phalanx run --detach`, tracked in the store, pruned by stopping all its replicas, and a controller
killed with SIGKILL is resumed without losing or repeating a trial.

The trials are tiny scripts (a loss that depends on one param, reported each step), not training.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest
from tests.integration.local.conftest import Phalanx, experiment_pids, wait_for

pytest.importorskip("optuna")

TRAIN = """\
import os, sys, time
from phalanx import log_metrics
x, steps, pause = float(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
for step in range(1, steps + 1):
    if os.environ.get("RANK", "0") == "0":
        log_metrics(step=step, loss=x + 1.0 / step)
    time.sleep(pause)
"""

SWEEP_TRAIN = """\
import argparse, os, time
from phalanx import log_metrics
parser = argparse.ArgumentParser()
parser.add_argument("--x", type=float)
parser.add_argument("--epochs", type=int)
args = parser.parse_args()
for step in range(1, args.epochs + 1):
    if os.environ.get("RANK", "0") == "0":
        log_metrics(step=step, loss=args.x + 1.0 / step)
    time.sleep(0.1)
"""


def group_file(phalanx: Phalanx, hptuning: str, steps: int = 3, pause: float = 0.1) -> Path:
    folder = phalanx.tmp / "group"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.py").write_text(TRAIN)
    text = (
        "version: 1\nkind: group\nname: sweep\nframework: pytorch\n"
        "environment:\n  replicas: {n_workers: 1}\n"
        f"hptuning:\n{hptuning}"
        f"run:\n  cmd: python train.py {{{{ x }}}} {steps} {pause}\n"
    )
    path = folder / "group.yml"
    path.write_text(text)
    return path


def group_doc(phalanx: Phalanx, group_id: str) -> dict[str, Any]:
    got = phalanx.cli("group", "get", group_id, "-o", "json")
    assert got.returncode == 0, got.stderr
    return dict(json.loads(got.stdout))


def only_group(phalanx: Phalanx) -> str:
    listed = phalanx.cli("group", "ls", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    (g,) = json.loads(listed.stdout)
    return str(g["id"])


def test_random_search_runs_six_two_replica_trials_two_at_a_time(phalanx: Phalanx) -> None:
    path = group_file(
        phalanx,
        "  concurrency: 2\n  random_search: {n_experiments: 6, seed: 7}\n"
        "  metric: {name: loss, optimization: minimize}\n  matrix:\n    x: {uniform: 0:1}\n",
    )
    done = phalanx.run("group", "run", "-f", str(path), "--json", timeout=300)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["status"] == "succeeded" and len(doc["trials"]) == 6
    store = phalanx.store()
    experiments = [store.get_experiment(t["experiment_id"]) for t in doc["trials"]]
    assert all(e.status == "succeeded" for e in experiments)
    assert all(len(store.list_replicas(e.id)) == 2 for e in experiments)  # master + worker-0
    for t in doc["trials"]:  # the sampled value is the trial's param and its command's argument
        assert t["state"] == "done" and 0 <= t["params"]["x"] <= 1
        assert abs(t["value"] - (t["params"]["x"] + 1 / 3)) < 1e-9
    best = min(doc["trials"], key=lambda t: t["value"])
    assert doc["best"]["number"] == best["number"]
    # never more than `concurrency` trials at once
    spans = [(e.created_at, e.finished_at) for e in experiments]
    for start, _ in spans:
        assert sum(1 for s, f in spans if s <= start < f) <= 2
    # the trials are linked to their group: `phalanx ls --group`
    listed = phalanx.cli("ls", "--group", doc["id"][:6], "-o", "json")
    assert listed.returncode == 0, listed.stderr
    assert {e["id"] for e in json.loads(listed.stdout)} == {e.id for e in experiments}
    assert {e["group_id"] for e in json.loads(listed.stdout)} == {doc["id"]}
    table = phalanx.cli("ls").stdout  # the experiment list says which group each trial belongs to
    assert table.splitlines()[0].split()[-1] == "GROUP" and doc["id"] in table
    table = phalanx.cli("group", "get", doc["id"])
    assert f"{best['number']}*" in table.stdout and "best (*)" in table.stdout


def test_successive_halving_prunes_and_every_replica_of_a_pruned_trial_is_gone(phalanx: Phalanx) -> None:
    # seed 5: the grid runs in the file's order, the best (0.1) first, so that one runs its 60
    # steps and the three after it are pruned at their first rung (seed 1 ran three whole trials
    # before the one it pruned)
    path = group_file(
        phalanx,
        "  concurrency: 1\n  grid_search: {}\n  seed: 5\n"
        "  metric: {name: loss, optimization: minimize}\n"
        "  pruning: {kind: successive_halving, min_resource: 2, reduction_factor: 2}\n"
        "  matrix:\n    x: {values: [0.1, 0.9, 0.2, 0.8]}\n",
        steps=60,
        pause=0.1,
    )
    done = phalanx.run("group", "run", "-f", str(path), "--json", timeout=300)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    pruned = [t for t in doc["trials"] if t["state"] == "pruned"]
    assert pruned, doc["trials"]
    store = phalanx.store()
    for t in pruned:
        exp = store.get_experiment(t["experiment_id"])
        assert exp.status == "stopped"
        assert (exp.reason or "").startswith(f"pruned at step {t['step']}: loss ")
        assert t["step"] < 60  # stopped mid-run
        assert not experiment_pids(phalanx.home, exp.id)
        decided = store_trial_internal(store, doc["id"], t["number"])["pruned_at"]
        for r in store.list_replicas(exp.id):
            assert r.state == "stopped" and r.finished_at is not None
            # promptly, not a latency figure: the chain (controller, supervisor, reaper, the
            # script's SIGTERM flush, the supervisor's describe) on two loaded cores
            assert r.finished_at - decided < 60.0, (r.name, r.finished_at - decided)
    assert doc["best"]["params"]["x"] == 0.1, doc["trials"]


def store_trial_internal(store: Any, group_id: str, number: int) -> dict[str, Any]:
    (t,) = [t for t in store.list_trials(group_id) if t.number == number]
    return dict(t.internal)


def test_a_controller_killed_mid_search_is_resumed_without_repeating_a_trial(phalanx: Phalanx) -> None:
    path = group_file(
        phalanx,
        "  concurrency: 2\n  random_search: {n_experiments: 5, seed: 3}\n"
        "  metric: {name: loss, optimization: minimize}\n  matrix:\n    x: {uniform: 0:1}\n",
        steps=10,
        pause=0.2,
    )
    controller = phalanx.start("group", "run", "-f", str(path))
    store = phalanx.store()

    def finished_and_running() -> bool:
        """A trial finished and another started: the kill may land inside a launch, which the
        resumed controller waits for only while that trial's supervisor lives (its launch lock)."""
        groups = store.list_groups()
        if not groups:
            return False
        trials = store.list_trials(groups[0].id)
        return sum(t.state == "done" for t in trials) >= 1 and any(t.state == "running" for t in trials)

    wait_for(finished_and_running, timeout=180, what="one finished trial and one running")
    controller.send_signal(signal.SIGKILL)
    controller.communicate(timeout=30)
    group_id = only_group(phalanx)
    assert group_doc(phalanx, group_id)["status"] == "running"  # nobody was left to say otherwise
    resumed = phalanx.run("group", "resume", group_id[:5], timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    doc = group_doc(phalanx, group_id)
    assert doc["status"] == "succeeded"
    assert [t["number"] for t in doc["trials"]] == [0, 1, 2, 3, 4]
    assert all(t["state"] == "done" for t in doc["trials"])
    ids = [t["experiment_id"] for t in doc["trials"]]
    assert len(set(ids)) == 5
    all_experiments = store.list_experiments().items
    assert sorted(e.id for e in all_experiments) == sorted(ids)  # none launched twice
    assert all(e.status == "succeeded" for e in all_experiments)
    assert len({t["params"]["x"] for t in doc["trials"]}) == 5
    # exactly the values an uninterrupted search with the same seed proposes: the resumed
    # controller opened the same study and seeded trial N's sampling from (seed, N), no replay
    assert [t["params"] for t in doc["trials"]] == uninterrupted(path, 5)
    again = phalanx.cli("group", "resume", group_id)  # refused: in this process
    assert again.returncode == 2 and "already succeeded: nothing to resume" in again.stderr


def uninterrupted(path: Path, trials: int) -> list[dict[str, Any]]:
    """The values a search of this file proposes when nothing interrupts it (random search: they
    do not depend on the trials' results), from the search's pure core."""
    import optuna

    from phalanx.groups import core
    from phalanx.spec.group import load_group

    hp = load_group(path).hptuning
    assert hp.search.seed is not None
    search = core.Search(
        hp, name="g", seed=hp.search.seed, planned=trials, storage=optuna.storages.InMemoryStorage()
    )
    search.restore([])
    proposed: list[dict[str, Any]] = []
    while len(proposed) < trials:
        for op in search.next():
            assert isinstance(op, core.Launch)
            proposed.append(op.params)
            search.ended(op.number, "succeeded", None)
    return proposed


def test_bad_group_files_are_located_errors_and_nothing_is_recorded(phalanx: Phalanx) -> None:
    path = group_file(
        phalanx,
        "  random_search: {n_experiments: 2}\n  matrix:\n    x: {unifrom: 0:1}\n    xs: {values: [1, 2]}\n",
    )
    bad = phalanx.cli("group", "run", "-f", str(path))  # refused: in this process
    assert bad.returncode == 2
    assert f"{path}:10:9: hptuning.matrix.x.unifrom: unknown distribution 'unifrom'" in bad.stderr
    assert (
        f"{path}:11:5: hptuning.matrix.xs: 'xs' is searched but run.cmd never uses {{{{ xs }}}}; did"
        in bad.stderr
    )
    assert "Traceback" not in bad.stderr
    checked = phalanx.cli("check", "-f", str(path))
    assert checked.returncode == 2 and "unknown distribution 'unifrom'" in checked.stderr
    listed = phalanx.cli("group", "ls")
    assert "no groups yet" in listed.stdout
    good = group_file(
        phalanx,
        "  bo: {n_iterations: 4, metric: {name: loss}}\n  matrix:\n    x: {uniform: 0:1}\n",
    )
    shown = phalanx.cli("check", "-f", str(good))
    assert shown.returncode == 0, shown.stderr
    assert "search: bo (4 trials)" in shown.stdout and "x  uniform(low=0, high=1)" in shown.stdout
    assert "worker-0" in shown.stdout and "command: python train.py 0.0 3 0.1" in shown.stdout


def test_an_estimator_sweep_runs_the_same_group_and_finds_the_best_run(phalanx: Phalanx) -> None:
    from phalanx.estimators import Experiment, PyTorch
    from phalanx.estimators.sweep import (
        GridParameterSampling,
        HyperDriveConfig,
        PrimaryMetricGoal,
        choice,
    )

    folder = phalanx.tmp / "sweep"
    folder.mkdir()
    (folder / "train.py").write_text(SWEEP_TRAIN)
    est = PyTorch(
        str(folder),
        entry_script="train.py",
        node_count=2,
        distributed_backend="gloo",
        script_params={"--epochs": 3},
    )
    config = HyperDriveConfig(
        estimator=est,
        hyperparameter_sampling=GridParameterSampling({"--x": choice(0.7, 0.2)}),
        primary_metric_name="loss",
        primary_metric_goal=PrimaryMetricGoal.MINIMIZE,
        max_total_runs=2,
        max_concurrent_runs=2,
    )
    group: Any = Experiment("sweep").submit(config)  # type: ignore[arg-type]
    details = group.wait_for_completion(timeout=240)
    assert details["status"] == "succeeded", details
    children = group.get_children()
    assert len(children) == 2 and all(r.get_status() == "succeeded" for r in children)
    best = group.get_best_run()
    assert best is not None and details["best"]["params"] == {"x": 0.2}
    assert best.id == details["best"]["experiment_id"]
    assert len(best.get_details()["replicas"]) == 2


def test_group_stop_stops_every_running_trial_and_hyperband_passes_the_budget(phalanx: Phalanx) -> None:
    folder = phalanx.tmp / "hb"
    folder.mkdir()
    (folder / "train.py").write_text(TRAIN)
    path = folder / "group.yml"
    path.write_text(
        "version: 1\nkind: group\nname: hb\nframework: pytorch\n"
        "environment:\n  replicas: {n_workers: 1}\n"
        "hptuning:\n  concurrency: 2\n"
        "  hyperband:\n    max_iter: 600\n    eta: 3\n    resource: {name: steps, type: int}\n"
        "    metric: {name: loss, optimization: minimize}\n"
        "  matrix:\n    x: {uniform: 0:1}\n"
        "run:\n  cmd: python train.py {{ x }} {{ steps }} 0.2\n"
    )
    started = phalanx.run("group", "run", "-f", str(path), "--detach")
    assert started.returncode == 0, started.stderr
    group_id = started.stdout.strip()
    store = phalanx.store()

    def two_running() -> list[Any]:
        running = [t for t in store.list_trials(group_id) if t.state == "running"]
        return (
            running
            if len(running) == 2 and all(experiment_pids(phalanx.home, t.experiment_id) for t in running)
            else []
        )

    running = wait_for(two_running, timeout=180, what="two running trials")
    assert all(t.params["steps"] == 600 for t in running)  # hyperband's budget, as a param
    stopped = phalanx.cli("group", "stop", group_id[:8])
    assert stopped.returncode == 0, stopped.stderr
    assert f"group {group_id} stopped" in stopped.stdout
    doc = group_doc(phalanx, group_id)
    assert doc["status"] == "stopped" and doc["reason"] == "stopped by phalanx group stop"
    for t in doc["trials"]:  # (hyperband may have pruned one and started another before the stop)
        assert t["state"] in ("stopped", "pruned"), t
        exp = store.get_experiment(t["experiment_id"])
        assert exp.status == "stopped"
        if t["state"] == "stopped":  # the reason left with the stop request, not "stopped by SIGTERM"
            assert exp.reason == "stopped by phalanx group stop", exp.reason
    assert not experiment_pids(phalanx.home)  # every replica of every trial is gone
    assert (
        phalanx.cli("group", "get", group_id, "-o", "json").stdout
        == phalanx.cli("group", "get", group_id, "-o", "json").stdout
    )  # and nothing starts any more
