"""``Run.get_context()`` outside any experiment: Azure's offline run. A script written for a
replica also runs as plain ``python train.py``: every call is accepted, nothing is recorded, and no
experiment is created (unlike ``Task.init``)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

import phalanx
from phalanx.errors import UsageError
from phalanx.runs import Run as SubmittedRun
from phalanx.tracking import context, task


@pytest.fixture
def outside(phalanx_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(task, "_current", None)  # no task of an earlier test in this process
    return phalanx_home


def test_phalanx_run_is_the_submitted_run_class_and_has_get_context(outside: Path) -> None:
    assert phalanx.Run is SubmittedRun  # existing users of phalanx.runs.Run see the same class
    assert isinstance(phalanx.Run.get_context(), context.OfflineRun)
    # where only the standard-library SDK imports, the SDK's class has the same classmethod
    assert isinstance(context.Run.get_context(), context.OfflineRun)


def test_the_offline_run_accepts_azures_calls_and_records_nothing(outside: Path, tmp_path: Path) -> None:
    run = phalanx.Run.get_context()
    assert run.offline and run.id == "OfflineRun"
    image = tmp_path / "plot.png"
    image.write_bytes(b"\x89PNG")
    run.log("accuracy", 0.9)
    run.log_list("losses", [3, 2, 1])
    run.log_row("Y over X", x=1, y=0.4)
    run.log_image("plot", path=image)
    run.tag("stage", "offline")
    run.upload_file("outputs/a.txt", io.BytesIO(b"x"))
    assert run.flush() is True
    assert list(outside.iterdir()) == []  # no spool, no store, no experiment
    assert task._current is None


def test_allow_offline_false_refuses_outside_an_experiment(outside: Path) -> None:
    with pytest.raises(UsageError, match="not inside a Phalanx experiment"):
        phalanx.Run.get_context(allow_offline=False)
