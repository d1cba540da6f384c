"""``PhalanxLogger``: a Lightning logger reporting into the Phalanx experiment of the process.

    from phalanx.integrations.lightning import PhalanxLogger
    trainer = Trainer(strategy="ddp", accelerator="cpu", devices=1, num_nodes=2, logger=PhalanxLogger())

Every rank reports (its own series, ``rank N``), so a DDP job is one experiment with a series per
rank and never one run per process (the W&B and MLflow loggers' known trap); ``rank_zero_only=True``
keeps rank 0's only. Hyperparameters (``save_hyperparameters()``) go to section ``Hyperparameters``
from every rank (they agree, so they show once). A checkpoint ``ModelCheckpoint`` writes is stored as
a Phalanx checkpoint (retention, ``phalanx resume``) and ``resume_path()`` gives it back for
``trainer.fit(..., ckpt_path=...)``.

The topology (docs/integrations.md): one Phalanx replica per Lightning node with
``framework: pytorch``, ``Trainer(devices=<processes_per_replica>, num_nodes=<replicas>)``: Lightning
reads MASTER_ADDR, MASTER_PORT, NODE_RANK and LOCAL_RANK from Phalanx's wiring and launches nothing.
Needs the ``lightning`` extra.
"""

from __future__ import annotations

from argparse import Namespace
from collections.abc import Mapping
from typing import Any

import torch.distributed as dist
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers.logger import Logger

from phalanx.tracking.task import Task, _own_series

SECTION = "Hyperparameters"


class PhalanxLogger(Logger):
    """Lightning's metrics, hyperparameters and checkpoints into the process's experiment.

    ``project``/``name`` name the experiment a plain ``python train.py`` creates (ignored under
    ``phalanx run``, which has named it). ``log_checkpoints=False`` leaves checkpoints to Lightning."""

    def __init__(
        self,
        project: str | None = None,
        name: str | None = None,
        *,
        rank_zero_only: bool = False,
        log_checkpoints: bool = True,
    ) -> None:
        super().__init__()
        self._task = Task.init(project_name=project, task_name=name, capture_tensorboard=False)
        # TensorBoard capture stands down: a TensorBoardLogger beside this one would store each point twice
        self._rank_zero_only = rank_zero_only
        self._log_checkpoints = log_checkpoints
        self._series: str | None = None

    # --- what Lightning asks of a logger -------------------------------------------------------------
    @property
    def name(self) -> str:
        return self._task.project or "phalanx"

    @property
    def version(self) -> str:
        return self._task.id

    @property
    def experiment(self) -> Task:
        """The Phalanx task, for anything the logger does not cover (``upload_artifact``, ``save_model``)."""
        return self._task

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        if self._skipped():
            return
        logger = self._task.get_logger()
        series = self._own_series()
        for title, value in metrics.items():
            try:
                number = float(value)
            except (TypeError, ValueError):
                continue
            logger.report_scalar(title, series, number, step)

    def log_hyperparams(self, params: dict[str, Any] | Namespace, *args: Any, **kwargs: Any) -> None:
        if self._skipped():
            return
        values = vars(params) if isinstance(params, Namespace) else dict(params)
        self._task.connect({str(k): _plain(v) for k, v in values.items()}, name=SECTION)

    def after_save_checkpoint(self, checkpoint_callback: ModelCheckpoint) -> None:
        """Store the file ``ModelCheckpoint`` just wrote as a Phalanx checkpoint (Lightning calls
        this on global rank 0 only, right after the file is written)."""
        if not self._log_checkpoints:
            return
        path = (
            getattr(checkpoint_callback, "_last_checkpoint_saved", "") or checkpoint_callback.last_model_path
        )
        if not path:
            return
        step = int(getattr(checkpoint_callback, "_last_global_step_saved", 0) or 0)
        score = checkpoint_callback.current_score
        metrics = {}
        if checkpoint_callback.monitor and score is not None:
            metrics[checkpoint_callback.monitor] = float(score)
        self._task.save_checkpoint(path, step, metrics)

    def resume_path(self) -> str | None:
        """The local path of the checkpoint a restarted or resumed experiment continues from (or the
        newest this process stored); None on a fresh start. Pass it as ``trainer.fit(ckpt_path=...)``."""
        latest = self._task.latest_checkpoint()
        if latest is None:
            return None
        return str(latest.path)

    def save(self) -> None:
        """Nothing to do: points are already on their way to the store (never blocks a step)."""

    def finalize(self, status: str) -> None:
        self._task.flush()

    # --- helpers -------------------------------------------------------------------------------------
    def _skipped(self) -> bool:
        return self._rank_zero_only and _global_rank() != 0

    def _own_series(self) -> str:
        """``rank N`` (the global rank) in a job of several processes, else the replica's series."""
        if self._series is None:
            if _world_size() > 1:
                self._series = f"rank {_global_rank()}"
            else:
                self._series = _own_series(self._task)
        return self._series


def _plain(value: Any) -> Any:
    """A value Phalanx stores as is (numbers, text, lists, dicts), anything else as its text."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    return str(value)


def _global_rank() -> int:
    """The process's rank in Lightning's process group (0 before it exists, or without one)."""
    return int(dist.get_rank()) if dist.is_available() and dist.is_initialized() else 0


def _world_size() -> int:
    return int(dist.get_world_size()) if dist.is_available() and dist.is_initialized() else 1
