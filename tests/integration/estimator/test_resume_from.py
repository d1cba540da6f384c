"""The estimator's resume_from: a new experiment starts from another's latest checkpoint; its
checkpoint_policy becomes the file's run.checkpoints (and a bad one is refused, naming it)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from phalanx import Experiment, PyTorch
from phalanx.errors import SpecError
from phalanx.runs import Run

SCRIPT = """
from phalanx import Task
task = Task.init()
ckpt = task.latest_checkpoint()
state = task.load_checkpoint() if ckpt else {"epoch": -1}
print("starting after epoch", state["epoch"], "from step", ckpt.step if ckpt else None, flush=True)
for epoch in range(state["epoch"] + 1, state["epoch"] + 3):
    task.save_checkpoint({"epoch": epoch}, step=epoch, metrics={"epoch": epoch})
task.flush()
"""


def test_resume_from_starts_where_another_experiment_stopped(tmp_path: Path, runs: list[Run]) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text(SCRIPT)
    est = PyTorch(src, entry_script="train.py", checkpoint_policy={"keep_last": 1})
    assert "keep_last: 1" in est.to_yaml()
    first = Experiment("first", project="t").submit(est)
    runs.append(first)
    first.wait_for_completion(output=io.StringIO())
    second = Experiment("second", project="t").submit(
        PyTorch(src, entry_script="train.py", resume_from=first.id)
    )
    runs.append(second)
    out = io.StringIO()
    second.wait_for_completion(show_output=True, output=out)
    assert "starting after epoch 1 from step 1" in out.getvalue(), out.getvalue()


def test_a_bad_checkpoint_policy_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="checkpoint_policy"):
        PyTorch(tmp_path, entry_script=None, checkpoint_policy={"keep_best": 2})
