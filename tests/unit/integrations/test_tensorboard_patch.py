"""The SummaryWriter wrapper: TensorBoard still writes its event files, each scalar is reported once
with its tag and step (add_scalars as main_tag/name), a value TensorBoard refuses raises its error
and is not reported, and stop() stops the reporting."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from phalanx.integrations import tensorboard
from phalanx.tracking import series as _series

writer_module = pytest.importorskip("torch.utils.tensorboard.writer")


class _Recorder:
    def __init__(self) -> None:
        self.points: list[tuple[str, str, float, int | None]] = []

    def report_scalar(self, title: str, series: str, value: float, iteration: int | None = None) -> None:
        self.points.append((title, series, value, iteration))


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch, phalanx_home: Path) -> Iterator[_Recorder]:
    rec = _Recorder()
    target: Any = _series.Target(task=None, logger=rec, series="worker-0")  # type: ignore[arg-type]
    monkeypatch.setattr(_series, "target", lambda: target)
    monkeypatch.setenv(tensorboard.ENV_CAPTURE, "0")  # restored afterwards; capture() sets it
    tensorboard.capture()
    tensorboard.capture()  # idempotent: still one report per call
    yield rec
    tensorboard.stop()


def test_scalars_are_reported_and_still_written(recorder: _Recorder, tmp_path: Path) -> None:
    import torch

    writer = writer_module.SummaryWriter(log_dir=str(tmp_path / "tb"))
    writer.add_scalar("train/loss", torch.tensor(0.5), 3)
    writer.add_scalar("lr", 0.1)  # no step: Phalanx numbers it
    writer.add_scalars("acc", {"train": 0.9, "val": 0.8}, global_step=4)
    with pytest.raises(ValueError):  # TensorBoard refuses it: the caller sees its error, nothing is reported
        writer.add_scalar("weird", "not a number", 5)
    writer.close()
    assert recorder.points == [
        ("train/loss", "worker-0", 0.5, 3),
        ("lr", "worker-0", 0.1, None),
        ("acc/train", "worker-0", 0.9, 4),
        ("acc/val", "worker-0", 0.8, 4),
    ]
    assert list((tmp_path / "tb").glob("events.out.tfevents.*"))  # the original writing is kept


def test_stop_stops_reporting(recorder: _Recorder, tmp_path: Path) -> None:
    tensorboard.stop()
    writer = writer_module.SummaryWriter(log_dir=str(tmp_path / "tb"))
    writer.add_scalar("loss", 1.0, 0)
    writer.close()
    assert recorder.points == []


def test_the_environment_switch() -> None:
    assert tensorboard.enabled_by_env() is True  # unset: on
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(tensorboard.ENV_CAPTURE, "0")
        assert tensorboard.enabled_by_env() is False
        mp.setenv(tensorboard.ENV_CAPTURE, "true")
        assert tensorboard.enabled_by_env() is True
