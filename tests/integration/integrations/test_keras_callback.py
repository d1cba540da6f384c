"""A Keras 3 `fit` on the torch backend with `PhalanxCallback`, run as a plain `python train.py`:
one experiment holding each epoch's loss, validation loss and metric, the sampled batches, and
the fit's settings and optimizer config as hyperparameters."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from phalanx.domain import ExperimentStatus

from .conftest import python_run, read_store, wait_for_no_process_under

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("keras") is None, reason="needs the keras extra"),
]

SCRIPT = """
import numpy as np
import keras
from phalanx.integrations.keras import PhalanxCallback

rng = np.random.default_rng(0)
x = rng.normal(size=(64, 4)).astype("float32")
y = x.sum(axis=1, keepdims=True)
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)])
model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.01), loss="mse", metrics=["mae"])
model.fit(x, y, epochs=3, batch_size=16, validation_split=0.25, verbose=0,
          callbacks=[PhalanxCallback(project="integrations", name="keras fit", log_every_n_batches=1)])
"""


def test_keras_fit_reports_each_epoch_and_its_settings(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    home = tmp_path / "home"
    done = python_run(home, script, KERAS_BACKEND="torch")
    assert done.returncode == 0, done.stderr[-3000:]
    assert wait_for_no_process_under(home) == []  # the script's ingester finished too
    store = read_store(home)
    [exp] = store.list_experiments().items
    assert (exp.project, exp.name, exp.status) == ("integrations", "keras fit", ExperimentStatus.SUCCEEDED)
    metrics = store.metrics(exp.id)
    for title in ("loss", "val_loss", "mae", "val_mae"):
        [series] = metrics[title].values()
        assert series.steps == [0, 1, 2], title
    [batches] = metrics["batch/loss"].values()
    assert batches.steps == list(range(1, 10))  # 48 training samples / 16 = 3 batches an epoch
    params = {(p.section, p.key): p.value for p in store.params(exp.id)}
    assert params[("Hyperparameters", "fit/epochs")] == 3
    assert params[("Hyperparameters", "optimizer/learning_rate")] == pytest.approx(0.01)
