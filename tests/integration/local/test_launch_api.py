"""The Runner's Python API (supervised in this process) with real processes: a foreign interpreter
reports through the SDK copy, a time limit fails the run, a finished replica leaves nothing running
behind it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from phalanx.config import Settings
from phalanx.domain import ExperimentStatus, Framework
from phalanx.runner import LaunchOptions, Runner
from phalanx.spec.model import ExperimentSpec, Topology
from phalanx.store import open_store
from phalanx.supervisor import preparing

from .conftest import experiment_pids

SYSTEM_PYTHON = "/usr/bin/python3"


def spec(command: str, workers: int = 0, **kw: object) -> ExperimentSpec:
    return ExperimentSpec(
        version=1,
        kind="experiment",
        command=(command,),
        framework=Framework.PYTORCH if workers else None,
        topology=Topology(n_workers=workers),
        **kw,  # type: ignore[arg-type]
    )


@pytest.mark.skipif(not shutil.which(SYSTEM_PYTHON), reason="needs a Python without Phalanx installed")
def test_a_replica_in_a_foreign_interpreter_reports_through_the_sdk_copy(
    phalanx_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As in a TensorFlow venv: Phalanx is not installed there, yet `from phalanx import Task` works."""
    monkeypatch.setattr(preparing, "interpreter", lambda *a, **k: SYSTEM_PYTHON)
    script = tmp_path / "report.py"
    script.write_text(
        "import sys\n"
        "from phalanx import Task\n"
        "task = Task.init(project_name='p', task_name='t')\n"
        "task.get_logger().report_scalar('loss', 'worker 00', value=0.5, iteration=1)\n"
        "print('interpreter', sys.executable)\n"
        "task.close()\n"
    )
    settings = Settings()
    outcome = Runner(settings).run(spec("python report.py"), LaunchOptions(workdir=tmp_path))
    assert outcome.status is ExperimentStatus.SUCCEEDED, outcome.reason
    store = open_store(settings)
    assert store.metrics(outcome.experiment_id)["loss"]["worker 00"].values == [0.5]
    lines = [line.text for line in store.logs(outcome.experiment_id)]
    assert any(line.startswith("interpreter /usr/bin/python3") for line in lines), lines


def test_max_run_seconds_fails_a_run_that_takes_too_long(phalanx_home: Path, tmp_path: Path) -> None:
    outcome = Runner().run(spec("sleep 600", workers=1, max_run_seconds=1), LaunchOptions(workdir=tmp_path))
    assert outcome.status is ExperimentStatus.FAILED and outcome.exit_code == 1
    assert outcome.reason == "ran longer than max_run_seconds (1 s)"
    assert experiment_pids(phalanx_home) == []


def test_what_a_successful_replica_left_in_the_background_is_stopped(
    phalanx_home: Path, tmp_path: Path
) -> None:
    outcome = Runner().run(spec("setsid sleep 600 & sleep 300 & echo done"), LaunchOptions(workdir=tmp_path))
    assert outcome.status is ExperimentStatus.SUCCEEDED
    assert experiment_pids(phalanx_home) == []
