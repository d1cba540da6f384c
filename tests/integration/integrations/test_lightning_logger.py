"""Lightning `Trainer(strategy="ddp")` with a `PhalanxLogger` under `phalanx run`, in the topology
docs/integrations.md recommends: a master and a worker (`framework: pytorch`), one Lightning node
each (`devices=1, num_nodes=2`), Lightning reading Phalanx's wiring and launching nothing. It makes
exactly one experiment with a series per rank, the module's hyperparameters, and rank 0's checkpoint;
TensorBoard capture stands down in the logger's processes (no point stored twice)."""

from __future__ import annotations

from pathlib import Path

import pytest

from phalanx.domain import ExperimentStatus

from .conftest import phalanx_run, read_store

pytest.importorskip("lightning")
pytestmark = pytest.mark.slow

SCRIPT = """
import os
import torch
import lightning as L
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.tensorboard import SummaryWriter
from phalanx import Task
from phalanx.integrations.lightning import PhalanxLogger

Task.current_task()  # a task first: TensorBoard capture is on until the PhalanxLogger turns it off


class Regression(L.LightningModule):
    def __init__(self, lr: float = 0.05, hidden: int = 8):
        super().__init__()
        self.save_hyperparameters()
        layers = [torch.nn.Linear(4, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1)]
        self.net = torch.nn.Sequential(*layers)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


torch.manual_seed(0)
x = torch.randn(64, 4)
data = DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=8)
trainer = L.Trainer(
    strategy="ddp", accelerator="cpu", devices=1, num_nodes=2, max_epochs=2, log_every_n_steps=1,
    logger=PhalanxLogger(), enable_progress_bar=False, enable_model_summary=False,
    default_root_dir="out",
)
trainer.fit(Regression(lr=0.05, hidden=8), data)
SummaryWriter(log_dir=f"tb/{trainer.global_rank}").add_scalar("tensorboard_only", 1.0, 0)
print("world", trainer.world_size, "rank", trainer.global_rank, "pid", os.getpid())
"""

EXPERIMENT = """
version: 1
kind: experiment
name: lightning ddp
project: integrations
framework: pytorch
environment:
  replicas:
    n_workers: 1
run:
  cmd: python train.py
"""


def test_lightning_ddp_makes_one_experiment_with_a_series_per_rank(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SCRIPT)
    (tmp_path / "polyaxonfile.yml").write_text(EXPERIMENT)
    home = tmp_path / "home"
    done = phalanx_run(home, tmp_path)
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    store = read_store(home)
    [exp] = store.list_experiments().items  # one experiment, not one per rank
    assert exp.status == ExperimentStatus.SUCCEEDED
    metrics = store.metrics(exp.id)
    assert "tensorboard_only" not in metrics  # the logger's process does not capture TensorBoard too
    loss = metrics["train_loss"]
    assert sorted(loss) == ["rank 0", "rank 1"]
    for series in loss.values():  # 64 samples, 2 ranks, batches of 8: 4 steps an epoch, 2 epochs
        assert series.steps == list(range(8))
    console = "\\n".join(line.text for line in store.logs(exp.id))
    assert "world 2 rank 0" in console and "world 2 rank 1" in console  # two processes, no more
    params = {(p.section, p.key): p.value for p in store.params(exp.id)}
    assert params[("Hyperparameters", "lr")] == 0.05
    assert params[("Hyperparameters", "hidden")] == 8
    checkpoints = [a for a in store.artifacts(exp.id) if a.kind == "checkpoint"]
    assert checkpoints, [a.name for a in store.artifacts(exp.id)]
