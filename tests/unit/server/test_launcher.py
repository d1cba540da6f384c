"""The launcher, without a process: it starts what was accepted (once), leaves what was started, and
ends what could not start with why. A FakeRunner stands in for ``Runner.start`` (which starts a
supervisor process); the store, the orders and the code bundles are real."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from phalanx.domain import ExperimentStatus
from phalanx.runner.options import LaunchOptions
from phalanx.server.launcher import Launcher
from phalanx.server.orders import read as read_order
from phalanx.server.settings import ServerSettings
from phalanx.spec.model import ExperimentSpec
from phalanx.store.base import LocalStore
from phalanx.store.submissions import SubmissionState
from tests.unit.server.test_durable_submit import bundle

TEXT = "version: 1\nkind: experiment\nproject: A\nrun:\n  cmd: python train.py\n"


class FakeProcess:
    """What ``Runner.start`` returns of the supervisor it started: here, one that ended at once."""

    pid = 4_000_000

    def poll(self) -> int:
        return 0

    def wait(self) -> int:
        return 0


class FakeRunner:
    """Records each start instead of starting a supervisor process."""

    def __init__(self) -> None:
        self.started: list[tuple[ExperimentSpec, LaunchOptions, Path | None]] = []

    def start(
        self, spec: Any, options: LaunchOptions, *, cwd: Path | None = None, headline: str | None = None
    ) -> tuple[str, FakeProcess, Path]:
        self.started.append((spec, options, cwd))
        assert options.experiment_id is not None
        return options.experiment_id, FakeProcess(), Path("/dev/null")


@pytest.fixture
def runner() -> FakeRunner:
    return FakeRunner()


@pytest.fixture
def launcher(store: LocalStore, settings: ServerSettings, runner: FakeRunner) -> Launcher:
    return Launcher(store, settings.store, runner=lambda: runner)  # type: ignore[arg-type,return-value]


def accepted(client: TestClient) -> str:
    r = client.post(
        "/api/v1/experiments",
        data={"file_name": "sub/exp.yml", "file_text": TEXT},
        files={"bundle": ("code.tar.gz", bundle({"sub/train.py": "print(1)\n"}), "application/gzip")},
    )
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def test_an_accepted_submit_is_unpacked_and_its_supervisor_started_once(
    client: TestClient, store: LocalStore, settings: ServerSettings, launcher: Launcher, runner: FakeRunner
) -> None:
    environ = dict(os.environ)
    exp_id = accepted(client)
    launcher.sweep()
    launcher.wake(exp_id)
    _run_queued(launcher)
    [(spec, options, cwd)] = runner.started
    work = settings.store.home / "server" / "work" / exp_id
    assert cwd == work / "sub" and options.accepted and options.experiment_id == exp_id
    assert spec.source_file == str(work / "sub" / "exp.yml")
    assert (work / "sub" / "train.py").read_text() == "print(1)\n"
    assert (work / "sub" / "exp.yml").read_text() == TEXT  # the text validated, whatever the bundle held
    sub = store.submission(exp_id)
    assert sub is not None and sub.state is SubmissionState.LAUNCHED
    assert read_order(settings.store, exp_id) is None  # carried out
    launcher.wake(exp_id)
    _run_queued(launcher)
    assert len(runner.started) == 1  # launched: never started twice
    assert dict(os.environ) == environ  # no request and no launch changed the server's environment


def test_an_experiment_a_supervisor_already_moved_is_not_started_again(
    client: TestClient, store: LocalStore, launcher: Launcher, runner: FakeRunner
) -> None:
    exp_id = accepted(client)
    store.update_experiment(exp_id, status=ExperimentStatus.STARTING)  # a supervisor started before a crash
    launcher.wake(exp_id)
    _run_queued(launcher)
    assert runner.started == []
    sub = store.submission(exp_id)
    assert sub is not None and sub.state is SubmissionState.LAUNCHED


def test_a_start_that_ended_before_it_ran_fails_the_experiment_with_what_it_said(
    client: TestClient, store: LocalStore, settings: ServerSettings, launcher: Launcher, runner: FakeRunner
) -> None:
    exp_id = accepted(client)
    log = settings.store.runs_dir / exp_id / "supervisor.log"
    log.parent.mkdir(parents=True)
    log.write_text("error: no dataset 'digits'; `phalanx data ls` lists them\n")
    launcher.wake(exp_id)
    _run_queued(launcher)
    assert runner.started == []  # never started again after a start that failed
    exp = store.get_experiment(exp_id)
    assert exp.status is ExperimentStatus.FAILED
    assert exp.reason == "the server could not start it: no dataset 'digits'; `phalanx data ls` lists them"
    assert {r.state for r in store.list_replicas(exp_id)} == {"stopped"}


def test_a_lost_launch_order_fails_the_experiment_instead_of_leaving_it_created(
    client: TestClient, store: LocalStore, settings: ServerSettings, launcher: Launcher
) -> None:
    exp_id = accepted(client)
    (settings.store.home / "server" / "orders" / f"{exp_id}.pickle").unlink()
    launcher.wake(exp_id)
    _run_queued(launcher)
    exp = store.get_experiment(exp_id)
    assert (
        exp.status is ExperimentStatus.FAILED
        and exp.reason == "the server could not start it: its launch order was lost"
    )


def _run_queued(launcher: Launcher) -> None:
    """What a worker thread does, here in the test's thread: each queued submission, in order."""
    while launcher.take() is not None:
        pass
