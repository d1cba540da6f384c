"""GroupLauncher, the one way a group starts (`phalanx group run|resume`, the server, HyperDrive):
``check`` refuses what cannot run; ``create`` checks before anything is recorded, then records
the group with its typed options, which its controller reads back (``recorded_group_spec``).
Starting the controller is a process: tests/integration/local/test_one_launch_path.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from phalanx.config import Settings
from phalanx.errors import NotFound
from phalanx.groups.launching import GroupLauncher, GroupOptions
from phalanx.machine.box import Isolation, isolation_of
from phalanx.plan import build_plan
from phalanx.spec.group import load_group, recorded_group_spec
from phalanx.store.artifacts import ArtifactStore
from phalanx.store.sql import SqlStore

pytest.importorskip("optuna")

GROUP = (
    "version: 1\nkind: group\nname: lr\nhptuning:\n  concurrency: 2\n  random_search: {n_experiments: 3}\n"
    "  matrix:\n    lr: {values: [0.1, 0.01]}\n"
    "run:\n  cmd: python train.py --lr {{ lr }} --epochs {{ epochs }}\nparams:\n  epochs: 1\n"
)


@pytest.fixture
def launcher(tmp_path: Path) -> GroupLauncher:
    store = SqlStore(f"sqlite:///{tmp_path / 'phalanx.db'}", ArtifactStore(str(tmp_path / "artifacts")))
    return GroupLauncher(Settings(home=str(tmp_path / "home")), store)


@pytest.fixture
def group_file(tmp_path: Path) -> Path:
    path = tmp_path / "sweep" / "group.yml"
    path.parent.mkdir()
    path.write_text(GROUP)
    return path


def test_a_group_is_recorded_with_its_options_and_read_back_the_same_way(
    launcher: GroupLauncher, group_file: Path
) -> None:
    group = load_group(group_file, params={"epochs": 5})
    options = GroupOptions(params={"epochs": 5}, oversubscribe=True, allow_unused=True)
    record = launcher.create(group, options)
    assert (record.name, record.search, record.planned, record.concurrency) == ("lr", "random", 3, 2)
    assert record.status == "created" and record.workdir == str(group_file.parent)  # the file's folder
    assert record.options == {
        "params": {"epochs": 5},
        "cluster": None,
        "oversubscribe": True,
        "allow_unused": True,
        "extra_params": False,
        "isolation": None,  # not a server's group: its trials run as the caller
    }
    again = recorded_group_spec(launcher.store.get_group(record.id))  # what its controller runs
    assert build_plan(again.trial_spec({"lr": 0.1})).command == "python train.py --lr 0.1 --epochs 5"


def test_a_boxed_group_keeps_its_box_for_every_later_controller(
    launcher: GroupLauncher, group_file: Path
) -> None:
    """A server's group (GroupOptions.isolation): its options hold the box its controller hands
    every trial (Controller: LaunchOptions.isolation) and a restarted server's launcher reads back."""
    box = Isolation("phx-nlp", 61000, 61000, "nlp", "http://127.0.0.1:8123", hidden=("/etc/phalanx",))
    record = launcher.create(load_group(group_file), GroupOptions(isolation=box))
    assert isolation_of(launcher.store.get_group(record.id).options) == box


def test_a_trial_that_cannot_run_is_refused_and_nothing_is_recorded(
    launcher: GroupLauncher, group_file: Path
) -> None:
    with pytest.raises(NotFound, match="no cluster named 'nowhere'"):
        launcher.create(load_group(group_file), GroupOptions(cluster="nowhere"))
    assert launcher.store.list_groups() == []


def test_check_refuses_a_group_whose_trials_cannot_run_and_records_nothing(
    launcher: GroupLauncher, group_file: Path
) -> None:
    """What the server's launcher asks of a group its submit recorded, before it starts the
    controller: the same refusal as ``create``'s."""
    with pytest.raises(NotFound, match="no cluster named 'nowhere'"):
        launcher.check(load_group(group_file), GroupOptions(cluster="nowhere"))
    launcher.check(load_group(group_file), GroupOptions())  # this machine, nothing to build
    assert launcher.store.list_groups() == []
