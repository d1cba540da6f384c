"""One controller per group: the lock on PHALANX_HOME/groups/ID/controller.lock (``groups.lock``).
A second controller, or `phalanx group resume` while one holds it (even one still starting, that
has not recorded its pid), is refused with a sentence (exit 2) and changes nothing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from phalanx.cli.app import app
from phalanx.cli.main import _register
from phalanx.config import Settings
from phalanx.errors import UsageError, exit_status
from phalanx.groups.lock import ControllerRunning, controller_lock, holder

_register()


def test_a_second_holder_is_refused_and_the_lock_is_free_again_after(tmp_path: Path) -> None:
    folder = tmp_path / "groups" / "abc"
    assert holder(folder) is None  # no lock file yet
    with controller_lock(folder, "abc"):
        assert holder(folder) == os.getpid()
        with pytest.raises(ControllerRunning) as refused, controller_lock(folder, "abc"):
            pass  # (flock: a second open of the file conflicts, in this process too)
        assert str(refused.value) == (
            f"group abc: another controller already runs it (pid {os.getpid()}); nothing to resume:"
            " `phalanx group get abc` shows its trials, `phalanx group stop abc` ends it"
        )
    assert holder(folder) is None
    with controller_lock(folder, "abc"):  # released: taken again at once
        pass


def test_group_resume_beside_a_starting_controller_exits_2_and_writes_nothing(
    phalanx_home: Path, tmp_path: Path
) -> None:
    from phalanx.groups import controller
    from phalanx.spec.group import load_group
    from phalanx.store import open_store

    path = tmp_path / "g.yml"
    path.write_text(
        "version: 1\nkind: group\nhptuning:\n  random_search: {n_experiments: 2}\n"
        "  matrix:\n    x: {uniform: 0:1}\nrun:\n  cmd: python t.py {{ x }}\n"
    )
    store = open_store()
    group = controller.create(store, load_group(path), workdir=tmp_path)
    folder = Settings().home / "groups" / group.id
    with controller_lock(folder, group.id):  # a controller that has not recorded its pid yet
        done = CliRunner().invoke(app, ["group", "resume", group.id])
    # (`phalanx` turns the error into its message and this exit status: cli.main)
    assert isinstance(done.exception, UsageError) and exit_status(done.exception) == 2
    assert str(done.exception).startswith(f"group {group.id}: another controller already runs it (pid ")
    after = store.get_group(group.id)
    assert after.status == "created" and after.controller_pid is None
    assert store.list_trials(group.id) == []
