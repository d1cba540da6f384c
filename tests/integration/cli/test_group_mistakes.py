"""`phalanx group ...` mistakes a tired user makes: each is a clear message, the right exit status
and no traceback (groups need no Optuna for these: nothing is run). The commands run in this
process (tests/support/cli.py); the first test runs the `phalanx` script itself, once."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.cli import phalanx_cli as phalanx
from tests.unit.server import fill
from tests.unit.server.teams_fixtures import make_group

from phalanx.config import Settings
from phalanx.domain import ExperimentStatus, Trial
from phalanx.store import open_store

PHALANX = Path(sys.executable).parent / "phalanx"


def test_group_ls_with_an_unknown_output_format_is_refused(phalanx_home: Path) -> None:
    done = subprocess.run(
        [str(PHALANX), "group", "ls", "-o", "yaml"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2, done.stdout
    assert "-o 'yaml': use table or json" in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_ls_of_a_group_with_no_trial_yet_names_the_group_filter(phalanx_home: Path, tmp_path: Path) -> None:
    from phalanx.groups import controller
    from phalanx.spec.group import load_group
    from phalanx.store import open_store

    path = tmp_path / "g.yml"
    path.write_text(
        "version: 1\nkind: group\nhptuning:\n  random_search: {n_experiments: 2}\n"
        "  matrix:\n    x: {uniform: 0:1}\nrun:\n  cmd: python t.py {{ x }}\n"
    )
    group = controller.create(open_store(), load_group(path), workdir=tmp_path)
    done = phalanx("ls", "--group", group.id)
    assert done.returncode == 0, done.stderr
    assert "no experiments match; `phalanx ls` without --group lists them all" in done.stdout


GROUP_WITH_PARAMS = (
    "version: 1\nkind: group\nparams: {steps: 3}\nhptuning:\n  random_search: {n_experiments: 2}\n"
    "  matrix:\n    x: {uniform: 0:1}\nrun:\n  cmd: python t.py --x {{ x }} --steps {{ steps }}\n"
)


def test_group_run_with_a_misspelt_param_is_refused_before_anything_is_recorded(
    phalanx_home: Path, tmp_path: Path
) -> None:
    """`phalanx run --param stpes=5` is refused; `group run` used to run the whole search with the
    file's steps and the typo silently recorded."""
    path = tmp_path / "g.yml"
    path.write_text(GROUP_WITH_PARAMS)
    done = phalanx("group", "run", "-f", path, "--param", "stpes=5")
    assert done.returncode == 2, done.stderr
    assert "--param stpes: the file neither declares a param 'stpes'" in done.stderr
    assert "(it has: steps, x)" in done.stderr and "--extra-params" in done.stderr
    assert "Traceback" not in done.stderr
    listed = phalanx("group", "ls")
    assert listed.stdout.startswith("no groups yet"), listed.stdout
    # a declared param is still fine, and --extra-params records an unknown one (check: nothing runs)
    assert phalanx("check", "-f", path, "--param", "steps=5").returncode == 0
    extra = phalanx("check", "-f", path, "--param", "stpes=5", "--extra-params")
    assert extra.returncode == 0, extra.stderr


def test_a_group_whose_controller_was_killed_says_so_and_how_to_finish_it(
    phalanx_home: Path, tmp_path: Path
) -> None:
    """After `kill -9` of `phalanx group run`, `group get`/`group ls` used to say `running` for ever,
    with no trial ever launched again and nothing telling the user to run `group resume`."""
    import socket

    from phalanx.groups import controller
    from phalanx.spec.group import load_group
    from phalanx.store import open_store

    path = tmp_path / "g.yml"
    path.write_text(GROUP_WITH_PARAMS)
    store = open_store()
    group = controller.create(store, load_group(path), workdir=tmp_path)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])  # a pid that no longer runs
    gone.wait()
    store.update_group(
        group.id, status="running", controller_pid=gone.pid, controller_host=socket.gethostname()
    )
    shown = phalanx("group", "get", group.id)
    assert shown.returncode == 0, shown.stderr
    assert "controller: not running (killed, or the machine restarted)" in shown.stdout
    assert f"`phalanx group resume {group.id}` finishes the search" in shown.stdout
    listed = phalanx("group", "ls")
    assert "running (no controller: group resume)" in listed.stdout, listed.stdout
    doc = json.loads(phalanx("group", "ls", "-o", "json").stdout)
    assert doc[0]["controller_running"] is False and doc[0]["status"] == "running"
    # a live controller (this test process runs phalanx code: its cmdline names pytest, not phalanx,
    # so use a real `phalanx` process) is not flagged
    live = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)", "phalanx"], stdin=subprocess.DEVNULL
    )
    try:
        store.update_group(group.id, controller_pid=live.pid)
        assert "controller: not running" not in phalanx("group", "get", group.id).stdout
    finally:
        live.kill()
        live.wait()


def test_a_group_whose_trials_environment_cannot_be_built_is_refused_once(
    phalanx_home: Path, tmp_path: Path
) -> None:
    """Every trial shares the group's `build`: a failing build step used to be built (and fail) once
    per trial, one after the other on the build lock (the corpus's pytorch mnist group: 10 failed
    builds, a minute), then the group failed. Now it is built once before anything is recorded."""
    path = tmp_path / "g.yml"
    path.write_text(
        GROUP_WITH_PARAMS.replace(
            "run:\n", "build:\n  build_steps: ['echo no such requirements >&2; exit 3']\nrun:\n"
        )
    )
    done = phalanx("group", "run", "-f", path)
    assert done.returncode == 2, done.stderr
    said = f"error: {path}: the trials' environment cannot be built: building the environment failed at"
    assert done.stderr.splitlines()[1].startswith(said), done.stderr  # (after 'phalanx: building ...')
    assert done.stderr.count("| no such requirements\n") == 1, done.stderr  # built once
    assert "Traceback" not in done.stderr
    assert phalanx("group", "ls").stdout.startswith("no groups yet")
    assert not (phalanx_home / "groups").exists() or not any((phalanx_home / "groups").iterdir())


def test_a_group_id_where_an_experiment_id_is_wanted_and_back_says_which_is_which(
    phalanx_home: Path, tmp_path: Path
) -> None:
    """`phalanx stop GROUP` (meant: `phalanx group stop`) and `phalanx group get TRIAL` used to say
    only 'no experiment'/'no group', as if the id were mistyped."""
    from phalanx.domain import ExperimentStatus
    from phalanx.groups import controller
    from phalanx.spec.group import load_group
    from phalanx.store import open_store

    path = tmp_path / "g.yml"
    path.write_text(GROUP_WITH_PARAMS)
    store = open_store()
    group = controller.create(store, load_group(path), workdir=tmp_path)
    trial = store.create_experiment(name="g-0", project="default", status=ExperimentStatus.SUCCEEDED)
    store.link_experiment(trial.id, group.id)
    plain = store.create_experiment(name="plain", project="default", status=ExperimentStatus.SUCCEEDED)
    for command in ("stop", "get", "resume", "logs"):
        done = phalanx(command, group.id[:6])
        assert done.returncode == 2, done.stderr
        assert f"{group.id} is an experiment group (g), not an experiment" in done.stderr, done.stderr
        assert f"`phalanx group get|stop|resume {group.id}`" in done.stderr
        assert "Traceback" not in done.stderr
    done = phalanx("group", "get", trial.id)
    assert done.returncode == 2
    assert f"{trial.id} is an experiment, a trial of group {group.id} (`phalanx group get {group.id}`)" in (
        done.stderr
    )
    done = phalanx("group", "stop", plain.id)
    assert done.returncode == 2
    assert f"{plain.id} is an experiment, not a group (`phalanx get {plain.id}`)" in done.stderr
    assert "no group 'nosuch'; `phalanx group ls` lists them" in phalanx("group", "get", "nosuch").stderr


def test_group_get_shows_a_trial_waiting_in_the_machines_queue_as_queued(
    phalanx_home: Path, tmp_path: Path
) -> None:
    """Trials that do not all fit on the machine wait in its queue; `group get` said `running` with
    no value for them, which looked like a stuck trial."""
    import time

    from phalanx.domain import ExperimentStatus, Trial
    from phalanx.groups import controller
    from phalanx.spec.group import load_group
    from phalanx.store import open_store

    path = tmp_path / "g.yml"
    path.write_text(GROUP_WITH_PARAMS)
    store = open_store()
    group = controller.create(store, load_group(path), workdir=tmp_path)
    for number, status in enumerate((ExperimentStatus.RUNNING, ExperimentStatus.QUEUED)):
        exp = store.create_experiment(name=f"g-{number}", project="default", status=status)
        store.add_trial(Trial(group.id, number, exp.id, {"x": 0.5}, "running", created_at=time.time()))
        store.link_experiment(exp.id, group.id)
    lines = phalanx("group", "get", group.id).stdout.splitlines()
    rows = {line.split()[0]: line.split()[2] for line in lines if line[:1].isdigit()}
    assert rows == {"0": "running", "1": "queued"}, lines


def test_group_delete_refuses_a_running_group_asks_first_then_takes_its_trials_with_it(
    phalanx_home: Path,
) -> None:
    settings = Settings()
    store = open_store(settings)
    group = make_group(store, "p")
    trial = fill.experiment(store, project="p")
    store.add_trial(Trial(group.id, 0, trial.id, {}, "done"))
    store.link_experiment(trial.id, group.id)
    store.update_group(group.id, status="running")
    folders = [
        settings.home / "groups" / group.id,
        settings.runs_dir / trial.id,
        settings.spool_dir / trial.id,
    ]
    for folder in folders:
        folder.mkdir(parents=True)
    refused = phalanx("group", "delete", group.id, "--yes")
    assert (
        refused.returncode == 2
        and f"group {group.id} is running; stop it before deleting it" in refused.stderr
    )
    assert (
        "Traceback" not in refused.stderr
        and store.get_experiment(trial.id).status is ExperimentStatus.SUCCEEDED
    )
    store.update_group(group.id, status="stopped")
    unasked = phalanx("group", "delete", group.id)  # no terminal to ask on
    assert unasked.returncode == 2 and "needs confirmation: pass --yes" in unasked.stderr
    short = phalanx("group", "delete", group.id[:5], "--yes")
    assert short.returncode == 2 and f"5-character prefix of group {group.id}" in short.stderr
    done = phalanx("group", "delete", group.id[:8], "--yes")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"deleted group {group.id} and its 1 experiment\n"
    assert store.list_groups() == [] and not any(f.exists() for f in folders)
    assert phalanx("get", trial.id).returncode == 2
