"""A script that writes to a SummaryWriter and never calls Phalanx, run as plain `python train.py`
by a master and a worker under `phalanx run` (no wrapper, no extra step): its scalars land in the
one experiment, a series per rank, and TensorBoard's own event files are still written. The capture
is armed at interpreter start but loaded only when the script imports a writer (issue 42: every
Python process of a replica pays nothing for it until then)."""

from __future__ import annotations

from pathlib import Path

import pytest

from phalanx.domain import ExperimentStatus

from .conftest import phalanx_run, read_store

pytest.importorskip("torch.utils.tensorboard")
pytestmark = pytest.mark.slow

SCRIPT = """
import os
import sys

rank = int(os.environ["RANK"])
# what the replica's interpreter start loaded of Phalanx: nothing until a writer is imported
with open(f"started-with-{rank}.txt", "w") as out:
    out.write(" ".join(sorted(m for m in sys.modules if m.startswith("phalanx"))))
from torch.utils.tensorboard import SummaryWriter

writer = SummaryWriter(log_dir=f"tb/rank{rank}")
for step in range(5):
    writer.add_scalar("train/loss", 1.0 / (step + 1) + rank, step)
    writer.add_scalars("lr", {"base": 0.1 * step, "warm": 0.2 * step}, step)
writer.close()
"""

EXPERIMENT = """
version: 1
kind: experiment
name: tensorboard capture
project: integrations
framework: pytorch
environment:
  replicas:
    n_workers: 1
run:
  cmd: python train.py
"""


def test_summary_writer_scalars_are_captured_per_rank_with_no_phalanx_call(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SCRIPT)
    (tmp_path / "polyaxonfile.yml").write_text(EXPERIMENT)
    home = tmp_path / "home"
    done = phalanx_run(home, tmp_path)
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    store = read_store(home)
    [exp] = store.list_experiments().items
    assert exp.status == ExperimentStatus.SUCCEEDED
    metrics = {k: v for k, v in store.metrics(exp.id).items() if not k.startswith("system/")}
    assert sorted(metrics) == ["lr/base", "lr/warm", "train/loss"]
    for rank, series in enumerate(["master", "worker-0"]):
        loss = metrics["train/loss"][series]
        assert loss.steps == [0, 1, 2, 3, 4]
        assert loss.values == pytest.approx([1.0 / (s + 1) + rank for s in range(5)])
        assert metrics["lr/warm"][series].values == pytest.approx([0.2 * s for s in range(5)])
    assert sorted(metrics["train/loss"]) == ["master", "worker-0"]
    for rank in (0, 1):  # the capture module was loaded at the writer's import, not at the start
        assert (tmp_path / f"started-with-{rank}.txt").read_text() == ""
    for rank in (0, 1):  # TensorBoard still wrote its own files
        assert list((tmp_path / "tb" / f"rank{rank}").glob("events.out.tfevents.*"))
