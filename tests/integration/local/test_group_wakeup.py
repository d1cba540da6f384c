"""A group's controller notices a trial's end by being woken (the trial's supervisor writes to the
group's wake FIFO once the outcome is stored; a forked supervisor's exit wakes it too), not by its
poll: with the poll set to an hour, a two-trial search run one trial at a time still finishes, so
the second trial was started because the first one's end woke the controller. Its trials are
forked from the controller with its open store and find their replicas' start times recorded."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from tests.integration.local.conftest import Phalanx

pytest.importorskip("optuna")

# `phalanx group run` with the controller's poll at one hour: only a wake-up moves it on
CONTROLLER = (
    "import sys; import phalanx.groups.controller as c; c.POLL_SECONDS = 3600.0; "
    "from phalanx.cli.main import main; sys.exit(main(sys.argv[1:]))"
)


def test_a_trials_end_wakes_the_controller_without_waiting_for_its_poll(phalanx: Phalanx) -> None:
    folder = phalanx.tmp / "group"
    folder.mkdir(parents=True)
    (folder / "train.py").write_text(
        "import sys\nfrom phalanx import log_metrics\nlog_metrics(step=1, loss=float(sys.argv[1]))\n"
    )
    path = folder / "group.yml"
    path.write_text(
        "version: 1\nkind: group\nname: wake\n"
        "hptuning:\n  concurrency: 1\n  grid_search: {}\n  seed: 3\n"
        "  metric: {name: loss, optimization: minimize}\n"
        "  matrix:\n    x: {values: [0.5, 0.25]}\n"
        "run:\n  cmd: python train.py {{ x }}\n"
    )
    argv = [sys.executable, "-c", CONTROLLER, "group", "run", "-f", str(path), "--json"]
    try:
        done = subprocess.run(
            argv, env=phalanx.env, cwd=phalanx.tmp, capture_output=True, text=True, timeout=300
        )
    except subprocess.TimeoutExpired as exc:  # a trial's end went unnoticed: the poll never came
        raise AssertionError(f"the controller was not woken by a trial's end: {exc.stderr!r}") from None
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(done.stdout)
    assert doc["status"] == "succeeded", doc
    assert sorted(t["value"] for t in doc["trials"]) == [0.25, 0.5]
    store = phalanx.store()
    for t in doc["trials"]:
        exp = store.get_experiment(t["experiment_id"])
        (replica,) = store.list_replicas(exp.id)
        # the engine's start of the replica, recorded by a supervisor that used the controller's store
        assert exp.started_at is not None and replica.started_at is not None
        assert exp.started_at <= replica.started_at <= (replica.finished_at or float("inf"))
