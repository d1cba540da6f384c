"""Issue #10: mistakes that used to pass silently are refused (or warned about) through the CLI,
each with where, what and how to fix, exit status 2 and no traceback. The commands run in this
process (tests/support/cli.py): no process of its own is needed to refuse a file."""

from __future__ import annotations

import os
import textwrap
import time
from pathlib import Path

import pytest
from tests.support.cli import Done
from tests.support.cli import phalanx_cli as phalanx


def refused(done: Done, *messages: str) -> None:
    assert done.returncode == 2, (done.stdout, done.stderr)
    for message in messages:
        assert message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def spec(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "polyaxonfile.yml"
    path.write_text(textwrap.dedent(text))
    return path


# --- limits ------------------------------------------------------------------------------------


def test_a_million_workers_is_refused_at_once_with_the_bound_and_how_to_raise_it(tmp_path: Path) -> None:
    """It used to take `phalanx check` 14 minutes and 7.6 GB to say the file was fine."""
    file = spec(
        tmp_path,
        """
        version: 1
        kind: experiment
        framework: pytorch
        environment:
          replicas:
            n_workers: 1000000
        run:
          cmd: python train.py
        """,
    )
    started = time.process_time()  # CPU seconds of this process: a loaded machine does not inflate them
    done = phalanx("check", "-f", file)
    assert time.process_time() - started < 30  # the whole command: the replicas were not expanded
    refused(done, "polyaxonfile.yml:7:5: environment.replicas.n_workers:", "1024", "PHALANX_MAX_REPLICAS")
    from phalanx.errors import SpecError
    from phalanx.spec.loader import load_spec

    started = time.process_time()  # CPU time: the regression was CPU-bound (14 min); a descheduled
    with pytest.raises(SpecError):  # test process on a loaded machine does not count
        load_spec(file)
    assert time.process_time() - started < 1.0
    file.write_text(file.read_text().replace("1000000", "1500"))
    refused(phalanx("check", "-f", file), "1501 replicas is more than the 1024")
    raised = phalanx("check", "-f", file, "-o", "json", env={"PHALANX_MAX_REPLICAS": "2000"})
    assert raised.returncode == 0, raised.stderr  # the bound is overridable


def test_more_local_processes_than_cores_without_requests_is_warned_about(
    tmp_path: Path, phalanx_home: Path
) -> None:
    cores = len(os.sched_getaffinity(0))
    file = spec(
        tmp_path,
        f"""
        version: 1
        kind: experiment
        framework: pytorch
        environment:
          replicas:
            n_workers: {cores}
        run:
          cmd: python train.py
        """,
    )
    done = phalanx("run", "-f", file, "--dry-run")
    assert done.returncode == 0, done.stderr
    assert f"warning: {cores + 1} processes" in done.stderr and "cpu: {requests: N}" in done.stderr
    one = spec(tmp_path, "version: 1\nkind: experiment\nrun:\n  cmd: python train.py\n")
    assert "warning" not in phalanx("run", "-f", one, "--dry-run").stderr


def test_a_dry_run_says_its_cores_are_those_of_an_idle_machine(tmp_path: Path) -> None:
    """A dry run is not admitted by the ledger: `cpus: [0]` would mislead a user whose core 0 is
    busy with another experiment, so the pinning is marked as provisional."""
    file = spec(
        tmp_path,
        """
        version: 1
        kind: experiment
        environment:
          resources: {cpu: {requests: 1, limits: 1}}
        run:
          cmd: python train.py
        """,
    )
    done = phalanx("run", "-f", file, "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "limits: {'cpus': [0], 'threads': 1}  (cores as on an idle machine)" in done.stdout


def test_zero_cpu_and_memory_limits_are_errors_not_no_limit(tmp_path: Path) -> None:
    file = spec(
        tmp_path,
        """
        version: 1
        kind: experiment
        environment:
          resources:
            cpu: {limits: 0}
            memory: {requests: 0, limits: 0}
        run:
          cmd: python train.py
        """,
    )
    refused(
        phalanx("check", "-f", file),
        "6:19: environment.resources.cpu.limits: a cpu limit of 0",
        "7:35: environment.resources.memory.limits: a memory limit of 0",
        "remove `limits` for none",
    )


def test_reserved_environment_names_are_errors_naming_who_sets_them(tmp_path: Path) -> None:
    file = spec(
        tmp_path,
        """
        version: 1
        kind: experiment
        framework: pytorch
        env:
          RANK: "3"
          PHALANX_EXPERIMENT_ID: mine
          MY_SETTING: fine
        build:
          env_vars: [[WORLD_SIZE, "8"], [OTHER, "fine"]]
        run:
          cmd: python train.py
        """,
    )
    done = phalanx("check", "-f", file)
    refused(
        done,
        "env.RANK: RANK is set by the PyTorch launcher",
        "env.PHALANX_EXPERIMENT_ID: PHALANX_EXPERIMENT_ID is set by Phalanx itself",
        "build.env_vars.WORLD_SIZE: WORLD_SIZE is set by the PyTorch launcher",
    )
    assert "MY_SETTING" not in done.stderr and "OTHER" not in done.stderr


# --- did-you-mean ------------------------------------------------------------------------------


def test_did_you_mean_offers_the_nearest_name_never_a_farther_one(tmp_path: Path) -> None:
    """`1gi` used to suggest 'Ti' and `workers: 2` the per-index list 'worker' (then failed on its
    value a second time)."""
    file = spec(
        tmp_path,
        """
        version: 1
        kind: experiment
        framework: pytorch
        environment:
          replicas:
            workers: 2
            Worker: [{index: 0}]
          resources:
            memory: {limits: 1gi}
        run:
          cmd: echo
        """,
    )
    done = phalanx("check", "-f", file)
    refused(
        done,
        "environment.replicas.workers: unknown key; did you mean 'n_workers'?",
        "environment.replicas.Worker: unknown key; did you mean 'worker'?",
        "unknown unit 'gi'; did you mean 'Gi'?",
    )
    assert "expected a list" not in done.stderr and "did you mean 'Ti'" not in done.stderr
    assert done.stderr.count("\n") == 4  # three problems and the summary: nothing said twice
