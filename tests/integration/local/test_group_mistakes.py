"""Group mistakes a tired user makes, on real one-replica trials: a metric name the script never
logs, a trial that always fails, `group resume` of a finished group. Each says what went wrong and
how to fix it, with no traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.integration.local.conftest import Phalanx

pytest.importorskip("optuna")

TRAIN = """\
import sys
from phalanx import log_metrics
if sys.argv[2] == "fail":
    sys.exit(3)
log_metrics(step=1, loss=float(sys.argv[1]))
"""


def group_file(phalanx: Phalanx, metric: str, mode: str = "ok") -> Path:
    folder = phalanx.tmp / "group"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.py").write_text(TRAIN)
    path = folder / "group.yml"
    path.write_text(
        "version: 1\nkind: group\nname: tired\n"
        "hptuning:\n  concurrency: 1\n  random_search: {n_experiments: 1, seed: 3}\n"
        f"  metric: {{name: {metric}, optimization: minimize}}\n  matrix:\n    x: {{uniform: 0:1}}\n"
        f"run:\n  cmd: python train.py {{{{ x }}}} {mode}\n"
    )
    return path


def test_a_metric_name_the_script_never_logs_is_named_with_what_it_did_log(phalanx: Phalanx) -> None:
    done = phalanx.run("group", "run", "-f", str(group_file(phalanx, "los")), "--json", timeout=120)
    assert done.returncode == 0, done.stderr
    said = "reported no los; it reported loss (did you mean 'loss'?): fix hptuning.metric.name"
    assert said in done.stderr
    doc = json.loads(done.stdout)
    assert doc["best"] is None and said in doc["trials"][0]["reason"]
    assert "no best trial: no trial reported los" in done.stderr
    shown = phalanx.cli("group", "get", doc["id"])
    assert shown.returncode == 0 and f"trial 0: {said}" in shown.stdout


def test_a_failing_trial_points_at_its_logs(phalanx: Phalanx) -> None:
    done = phalanx.run("group", "run", "-f", str(group_file(phalanx, "loss", "fail")), "--json", timeout=120)
    assert done.returncode == 1, done.stderr
    exp = json.loads(done.stdout)["trials"][0]["experiment_id"]
    assert f"failed: master exited with code 3 (`phalanx logs {exp}` shows why)" in done.stderr
    group = json.loads(done.stdout)["id"]
    shown = phalanx.cli("group", "get", group)
    assert "trial 0: master exited with code 3" in shown.stdout
    # resuming a trial by hand is the user's own run: said, since the group's record stays as it was
    again = phalanx.run("resume", exp, timeout=120)
    assert again.returncode == 1, again.stderr
    assert (
        f"note: experiment {exp} is a trial of group {group}; the group keeps what it recorded"
        in again.stderr
    )


def test_resume_of_a_finished_group_is_a_mistake_with_what_to_do(phalanx: Phalanx) -> None:
    path = group_file(phalanx, "loss")
    done = phalanx.run("group", "run", "-f", str(path), "--json", timeout=120)
    assert done.returncode == 0, done.stderr
    group_id = json.loads(done.stdout)["id"]
    again = phalanx.cli("group", "resume", group_id)  # refused: in this process
    assert again.returncode == 2, again.stdout
    assert f"group {group_id} already succeeded: nothing to resume" in again.stderr
    assert f"`phalanx group run -f {path}` starts a new search" in again.stderr
    assert "Traceback" not in again.stderr
    assert len(phalanx.store().list_experiments().items) == 1  # nothing run again


def test_a_group_stopped_while_its_trials_launch_still_links_them(phalanx: Phalanx) -> None:
    """Ctrl-C (or `group stop`) right after a trial's `phalanx run --detach` began: the controller
    waits for that launch and stops the experiment. It must still be linked to its group, or
    `phalanx ls --group ID` misses it and `phalanx ls` shows it as a plain experiment."""
    from phalanx.config import Settings
    from phalanx.groups import controller
    from phalanx.spec.group import load_group

    path = group_file(phalanx, "loss")
    path.write_text(
        path.read_text()
        .replace("n_experiments: 1", "n_experiments: 2")
        .replace("concurrency: 1", "concurrency: 2")
    )
    settings = Settings(home=phalanx.home)
    store = phalanx.store()
    group = controller.create(store, load_group(path), workdir=path.parent)
    ctl = controller.Controller(store, settings, group.id)

    def say(text: str) -> None:  # the first launch under way: interrupt before the loop sees it
        if "starting" in text:
            ctl.interrupted = "stopped by SIGINT"

    ctl.say = say
    done = ctl.run(handle_signals=False)
    assert done.status == "stopped"
    trials = store.list_trials(group.id)
    assert len(trials) == 1  # the second was never started
    listed = phalanx.cli("ls", "--group", group.id, "-o", "json")
    assert listed.returncode == 0, listed.stderr
    assert [e["id"] for e in json.loads(listed.stdout)] == [trials[0].experiment_id]
    assert store.get_experiment(trials[0].experiment_id).status.done


def test_group_stop_after_a_killed_controller_keeps_a_trial_that_had_already_succeeded(
    phalanx: Phalanx,
) -> None:
    """The controller was SIGKILLed; one trial then finished with its metric while nobody watched.
    `group stop` (which does the stopping itself) must record that trial as done with its value
    (it is the best trial), not as stopped by the stop that never touched it."""
    from phalanx.domain import Trial
    from phalanx.groups import controller
    from phalanx.spec.group import load_group

    path = group_file(phalanx, "loss")
    (path.parent / "exp.yml").write_text(
        "version: 1\nkind: experiment\nname: tired-0\nrun:\n  cmd: python train.py 0.25 ok\n"
    )
    ran = phalanx.run("run", "-f", str(path.parent / "exp.yml"))
    assert ran.returncode == 0, ran.stderr
    store = phalanx.store()
    (exp,) = store.list_experiments().items
    group = controller.create(store, load_group(path), workdir=path.parent)
    store.add_trial(Trial(group.id, 0, exp.id, {"x": 0.25}, state="running"))
    store.link_experiment(exp.id, group.id)

    stopped = phalanx.cli("group", "stop", group.id)
    assert stopped.returncode == 0, stopped.stderr
    doc = json.loads(phalanx.cli("group", "get", group.id, "-o", "json").stdout)
    assert doc["status"] == "stopped"
    (trial,) = doc["trials"]
    assert trial["state"] == "done" and trial["value"] == 0.25 and trial["step"] == 1
    assert doc["best"]["number"] == 0
    assert store.get_experiment(exp.id).status == "succeeded"  # untouched by the stop


def test_early_stopping_names_the_trials_it_stops(phalanx: Phalanx) -> None:
    """Early stopping ends the group while another trial still runs: the progress says that trial
    was stopped and why, instead of the group simply ending."""
    folder = phalanx.tmp / "early"
    folder.mkdir()
    (folder / "train.py").write_text(
        "import sys, time\nfrom phalanx import log_metrics\nx = float(sys.argv[1])\n"
        "for step in range(1, 300 if x > 0.5 else 2):\n"
        "    log_metrics(step=step, loss=x)\n    time.sleep(0.1)\n"
    )
    path = folder / "group.yml"
    path.write_text(
        "version: 1\nkind: group\nname: early\nhptuning:\n  concurrency: 2\n  grid_search: {}\n"
        "  metric: {name: loss, optimization: minimize}\n"
        "  early_stopping: [{metric: loss, value: 0.5, optimization: minimize}]\n"
        "  matrix:\n    x: {values: [0.1, 0.9]}\nrun:\n  cmd: python train.py {{ x }}\n"
    )
    done = phalanx.run("group", "run", "-f", str(path), "--json", timeout=120)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    (slow,) = [t for t in doc["trials"] if t["params"]["x"] == 0.9]
    assert slow["state"] == "stopped"
    said = f"trial {slow['number']}: {slow['experiment_id']} stopped (group early stopping: trial"
    assert said in done.stderr


def test_a_trial_whose_supervisor_is_sigkilled_ends_failed_and_the_group_goes_on(phalanx: Phalanx) -> None:
    """A trial's `phalanx run` SIGKILLed (the OOM killer, a careless `kill -9`): its replicas die
    with it, but the controller used to watch the trial as `running` for ever (it ended only when
    some `phalanx ls` or `get` happened to look)."""
    import contextlib
    import os
    import signal
    import time

    folder = phalanx.tmp / "group"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "group.yml"
    path.write_text(
        "version: 1\nkind: group\nname: killed\n"
        "hptuning:\n  concurrency: 1\n  random_search: {n_experiments: 1, seed: 3}\n"
        "  metric: {name: loss, optimization: minimize}\n  matrix:\n    x: {uniform: 0:1}\n"
        "run:\n  cmd: python -c 'import time; time.sleep(120)' {{ x }}\n"
    )
    controller = phalanx.start("group", "run", "-f", str(path))
    deadline = time.monotonic() + 60
    pid_file = None
    while pid_file is None and time.monotonic() < deadline:
        found = (
            list((phalanx.home / "runs").glob("*/supervisor.pid")) if (phalanx.home / "runs").exists() else []
        )
        pid_file = found[0] if found else None
        time.sleep(0.1)
    assert pid_file is not None, "the trial never started"
    experiment_id = pid_file.parent.name
    from phalanx.errors import NotFound

    store = phalanx.store()
    while time.monotonic() < deadline:  # running: its replica started
        with contextlib.suppress(NotFound):  # (its supervisor records it just after its pid file)
            if store.get_experiment(experiment_id).status.value == "running":
                break
        time.sleep(0.1)
    os.kill(int(pid_file.read_text().split()[0]), signal.SIGKILL)
    _, err = controller.communicate(timeout=60)  # hung for ever before
    assert controller.returncode == 1, err  # its only trial failed
    assert f"trial 0: {experiment_id} failed: its supervisor (pid" in err, err
    assert "was killed before it recorded the outcome" in err
    assert phalanx.store().get_experiment(experiment_id).status.value == "failed"
