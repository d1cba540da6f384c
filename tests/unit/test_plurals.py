"""A count of one thing is said in the singular wherever a user reads a count (``domain.plural``):
`phalanx check` of a group and of its trial's topology, the warning about crowded cores, the
ledger's refusal; "1 trials", "1 workers", "1 GPUs" before."""

from __future__ import annotations

from pathlib import Path

from phalanx.domain import Resources, plural
from phalanx.machine.ledger import Capacity, Need, never_fits
from phalanx.machine.limits import Machine, crowding_warning
from tests.support.cli import phalanx_cli


def test_plural_says_one_thing_in_the_singular() -> None:
    assert [plural(n, "trial") for n in (0, 1, 2)] == ["0 trials", "1 trial", "2 trials"]
    assert [plural(n, "process", "processes") for n in (1, 3)] == ["1 process", "3 processes"]


def test_check_of_a_one_trial_group_with_one_worker_says_both_in_the_singular(tmp_path: Path) -> None:
    file = tmp_path / "g.yml"
    file.write_text(
        "version: 1\nkind: group\nframework: pytorch\nenvironment:\n  replicas:\n    n_workers: 1\n"
        "hptuning:\n  grid_search: {n_experiments: 5}\n  matrix:\n    lr: {values: [0.1]}\n"
        "run:\n  cmd: python t.py --lr={{ lr }}\n"
    )
    done = phalanx_cli("check", "-f", str(file))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("search: grid (1 trial: the whole grid)"), done.stdout
    assert "replicas: 1 master, 1 worker, 0 ps" in done.stdout, done.stdout


def test_the_machines_messages_count_one_core_replica_or_gpu_in_the_singular() -> None:
    warning = crowding_warning([("master", Resources(), 3)], Machine(cpus=(0,), memory_mib=1024, gpus=()))
    assert warning is not None and warning.startswith(
        "3 processes (1 replica without cpu requests) will share this machine's 1 core and run slowly"
    )
    refused = never_fits(Need(gpus=1), Capacity(cpus=(0, 1), gpus=(), memory_mib=1024))
    assert refused == "the experiment needs 1 GPU (it has 0) on this machine"
