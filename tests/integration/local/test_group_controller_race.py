"""One controller per group (issue 22): two `phalanx group resume ID` started together, or a `group
resume` beside the controller that `group run --detach` is still starting. Exactly one controller
runs; the other exits 2 with a sentence (no `UNIQUE constraint failed` traceback), and no trial
repeats another's values."""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.integration.local.conftest import Phalanx, wait_for

pytest.importorskip("optuna")

RACES = 8  # each race is one lock contest; most of them must meet (see the last assertion)
TRAIN = "import sys\nfrom phalanx import log_metrics\nlog_metrics(step=1, loss=float(sys.argv[1]))\n"

# what the controller that lost says, whichever check it met first
LOSER = re.compile(
    r"(?m)^error: group \w+(: another controller already runs it( \(pid \d+\))?; nothing to resume"
    r"|: its controller still runs \(pid \d+\); nothing to resume"
    r"| already stopped: nothing to resume"  # the winner stopped it before the loser looked
    r"|: another controller ran it to its end \(stopped\) meanwhile)"
)


def group_file(phalanx: Phalanx, trials: int) -> Path:
    folder = phalanx.tmp / "race"
    folder.mkdir(exist_ok=True)
    (folder / "train.py").write_text(TRAIN)
    path = folder / "group.yml"
    path.write_text(
        "version: 1\nkind: group\nname: race\nframework: pytorch\n"
        f"hptuning:\n  concurrency: 2\n  random_search: {{n_experiments: {trials}, seed: 4}}\n"
        "  metric: {name: loss, optimization: minimize}\n  matrix:\n    x: {uniform: 0:1}\n"
        "run:\n  cmd: python train.py {{ x }}\n"
    )
    return path


def _resume(home: str, group_id: str, stderr: str) -> None:
    """A `phalanx group resume ID` in a forked child: the CLI's own ``main``, its exit status the
    child's (forked from a fork server that imported it all already: a race costs no start-up)."""
    os.environ["PHALANX_HOME"] = home
    sys.stderr = open(stderr, "w", buffering=1)  # noqa: SIM115 (the child's whole life)
    sys.stdout = open(os.devnull, "w")  # noqa: SIM115
    from phalanx.cli.main import main

    main(["group", "resume", group_id])


# The CLI and Optuna, and what a `group resume` imports on its way (the launcher, Optuna's RDB
# storage and its Alembic migrations, pydantic's lazy modules): imported in the fork server, a race
# costs each child about 1 s of CPU instead of 2. A name that no longer exists is skipped (the fork
# server ignores a preload's ImportError).
PRELOAD = [
    "phalanx.cli.main",
    "phalanx.cli.group",
    "phalanx.groups.controller",
    "optuna",
    "phalanx.groups.launching",
    "phalanx.runner.detached",
    "phalanx.supervisor",
    "phalanx.cli.lean",
    "phalanx.machine.locks",
    "phalanx.machine.ports",
    "phalanx.tracking.tensorboard",
    "optuna.storages._rdb.storage",
    "optuna.storages._rdb.models",
    "alembic.command",
    "alembic.migration",
    "alembic.script",
    "pydantic.main",
    "pydantic.type_adapter",
    "pydantic.types",
    "numpy.random",
    "typer._adapters",
    "typer._click.decorators",
]


def _fork_server(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Children forked from a fork server that imported the CLI and Optuna (a race costs no
    start-up) and runs no thread: a fork of pytest itself, after other tests left threads in it,
    could inherit a lock one of them held (an import's) and hang. Started outside the test's home,
    so it is not a process left behind under it."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    with monkeypatch.context() as m:
        m.delenv("PHALANX_HOME")
        from multiprocessing import forkserver

        forkserver.ensure_running()
    return ctx


@pytest.mark.timeout(600)  # 8 races: about 16 s here, 1 min when the 2 cores are shared by many
def test_two_resumes_at_once_run_one_controller_8_times_out_of_8(
    phalanx: Phalanx, monkeypatch: pytest.MonkeyPatch
) -> None:
    from phalanx.groups import controller
    from phalanx.spec.group import load_group

    fork = _fork_server(monkeypatch)
    store = phalanx.store()
    spec = load_group(group_file(phalanx, 2))
    lost_to_a_running_controller = 0
    for race in range(RACES):
        # a group whose stop was asked for: the controller that wins stops it at once, with no
        # trial to wait for; the one that loses must say so and change nothing
        g = controller.create(store, spec, workdir=phalanx.tmp / "race")
        store.update_group(g.id, stop_requested=True)
        errs = [phalanx.tmp / f"race-{race}-{i}.err" for i in range(2)]
        procs = [fork.Process(target=_resume, args=(str(phalanx.home), g.id, str(e))) for e in errs]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout=120)
            if p.is_alive():
                p.kill()
                p.join()
        outs = [(p.exitcode, e.read_text()) for p, e in zip(procs, errs, strict=True)]
        assert sorted(code or 0 for code, _ in outs) == [2, 130], (race, outs)  # one ran, one refused
        (loser,) = [err for code, err in outs if code == 2]
        assert LOSER.search(loser), (race, loser)
        assert all("Traceback" not in err for _, err in outs), outs
        lost_to_a_running_controller += "already stopped" not in loser
        done = store.get_group(g.id)
        assert done.status == "stopped" and done.controller_pid is None
        assert store.list_trials(g.id) == []
    # the two met (not one after the other's end) in most races: the lock was what decided
    assert lost_to_a_running_controller >= RACES // 2


def test_resume_beside_a_starting_detached_run_launches_each_trial_once(phalanx: Phalanx) -> None:
    path = group_file(phalanx, 3)
    started = phalanx.run("group", "run", "-f", str(path), "--detach")
    assert started.returncode == 0, started.stderr
    gid = started.stdout.strip()
    resumed = phalanx.start("group", "resume", gid)  # while the detached controller starts
    code = resumed.wait(timeout=240)
    _, err = resumed.communicate(timeout=30)
    store = phalanx.store()
    wait_for(lambda: store.get_group(gid).done, timeout=240, what="the group's end")
    log = (phalanx.home / "groups" / gid / "controller.log").read_text()
    assert "Traceback" not in err + log and "UNIQUE" not in err + log, (err, log)
    if code == 2:  # the user's resume lost
        assert LOSER.search(err) or "already succeeded: nothing to resume" in err, err
    else:  # the detached controller lost: its log says so
        assert code == 0, err
        assert LOSER.search(log), log
    doc = json.loads(phalanx.cli("group", "get", gid, "-o", "json").stdout)
    assert doc["status"] == "succeeded" and [t["number"] for t in doc["trials"]] == [0, 1, 2]
    assert len({t["params"]["x"] for t in doc["trials"]}) == 3
    ids = {t["experiment_id"] for t in doc["trials"]}
    linked = json.loads(phalanx.cli("ls", "--group", gid, "-o", "json").stdout)
    assert {e["id"] for e in linked} == ids  # three experiments, none launched twice
