"""Lightning `Trainer(strategy="ddp")` with a `PhalanxLogger` under `phalanx run`, in the topology
docs/integrations.md recommends: a master and a worker (`framework: pytorch`), one Lightning node
each (`devices=1, num_nodes=2`), Lightning reading Phalanx's wiring and launching nothing. It makes
exactly one experiment with a series per rank, the module's hyperparameters, and rank 0's checkpoint;
TensorBoard capture stands down in the logger's processes (no point stored twice). The first attempt
dies as epoch 1 begins; with `max_restarts: 1` the restarted group resumes from the Phalanx checkpoint
(`logger.resume_path()` as `ckpt_path`): the step counter continues at 4, each step is logged once."""

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


class DieOnce(L.Callback):  # rank 0 exits once epoch 0's checkpoint is stored; the group restarts
    def on_train_start(self, trainer, module):
        print("rank", trainer.global_rank, "starts at step", trainer.global_step, flush=True)

    def on_train_epoch_start(self, trainer, module):
        if trainer.current_epoch == 1 and resume is None and trainer.global_rank == 0:
            os._exit(3)


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
logger = PhalanxLogger()
trainer = L.Trainer(
    strategy="ddp", accelerator="cpu", devices=1, num_nodes=2, max_epochs=2, log_every_n_steps=1,
    logger=logger, enable_progress_bar=False, enable_model_summary=False, callbacks=[DieOnce()],
    default_root_dir="out",
)
resume = logger.resume_path()
print("rank", os.environ["RANK"], "resuming from", resume and os.path.basename(resume), flush=True)
trainer.fit(Regression(lr=0.05, hidden=8), data, ckpt_path=resume)
print("rank", trainer.global_rank, "finished at step", trainer.global_step, flush=True)
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
  max_restarts: 1
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
    lines = [line.text for line in store.logs(exp.id)]
    console = "\\n".join(lines)
    assert "world 2 rank 0" in console and "world 2 rank 1" in console  # two processes, no more
    for rank in (0, 1):  # fresh, then resumed from rank 0's epoch-0 checkpoint (4 steps) by both ranks
        assert f"rank {rank} resuming from None" in lines, lines
        assert f"rank {rank} resuming from step-000000004-epoch=0-step=4.ckpt" in lines, lines
        assert lines.count(f"rank {rank} starts at step 0") == 1  # epoch 0 is never trained again
        assert lines.count(f"rank {rank} starts at step 4") == 1  # the step counter continues
        assert f"rank {rank} finished at step 8" in lines
    params = {(p.section, p.key): p.value for p in store.params(exp.id)}
    assert params[("Hyperparameters", "lr")] == 0.05
    assert params[("Hyperparameters", "hidden")] == 8
    from phalanx.checkpoints import from_artifacts

    assert [c.step for c in from_artifacts(store.artifacts(exp.id))] == [4, 8]
