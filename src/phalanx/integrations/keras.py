"""``PhalanxCallback``: Keras 3 ``fit`` metrics into the Phalanx experiment of the process, any backend.

    from phalanx.integrations.keras import PhalanxCallback
    model.fit(x, y, epochs=5, validation_split=0.2, callbacks=[PhalanxCallback()])

Each epoch's logs (``loss``, ``val_loss``, every compiled metric) are reported at step = epoch into
the process's own series (``master``, ``worker-0``, ``rank N``), and with ``log_every_n_batches=N``
the training batches' too, under ``batch/<name>`` at step = the batch's global count. The fit's
settings (epochs, steps) and the optimizer's config go to section ``Hyperparameters`` when training
begins. Needs the ``keras`` extra.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import keras

from phalanx.tracking.task import Task, _own_series

SECTION = "Hyperparameters"


class PhalanxCallback(keras.callbacks.Callback):  # type: ignore[misc]  # keras ships no type hints
    """Report Keras training into Phalanx. ``project``/``name`` name the experiment a plain
    ``python train.py`` creates (ignored under ``phalanx run``)."""

    def __init__(
        self, project: str | None = None, name: str | None = None, *, log_every_n_batches: int = 0
    ) -> None:
        super().__init__()
        self._task = Task.init(project_name=project, task_name=name)
        self._every = int(log_every_n_batches)
        self._batches = 0

    @property
    def task(self) -> Task:
        return self._task

    def on_train_begin(self, logs: Mapping[str, Any] | None = None) -> None:
        values = {f"fit/{k}": v for k, v in (self.params or {}).items() if _plain(v)}
        optimizer = getattr(self.model, "optimizer", None)
        if optimizer is not None:
            config = optimizer.get_config()
            values.update({f"optimizer/{k}": v for k, v in config.items() if _plain(v)})
        if values:
            self._task.connect(values, name=SECTION)

    def on_train_batch_end(self, batch: int, logs: Mapping[str, Any] | None = None) -> None:
        self._batches += 1
        if self._every > 0 and self._batches % self._every == 0:
            self._report(logs, self._batches, prefix="batch/")

    def on_epoch_end(self, epoch: int, logs: Mapping[str, Any] | None = None) -> None:
        self._report(logs, epoch, prefix="")

    def on_train_end(self, logs: Mapping[str, Any] | None = None) -> None:
        self._task.flush()

    def _report(self, logs: Mapping[str, Any] | None, step: int, prefix: str) -> None:
        logger = self._task.get_logger()
        series = _own_series(self._task)
        for key, value in (logs or {}).items():
            try:
                number = float(value)
            except (TypeError, ValueError):
                continue
            logger.report_scalar(f"{prefix}{key}", series, number, step)


def _plain(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float, str))
