"""The Python launch API (seed 004): estimators, distribution configs, Experiment.submit -> Run.

`from phalanx import Experiment, PyTorch` resolves here lazily, so `import phalanx` inside a replica
never pays for it.
"""

from __future__ import annotations

from phalanx.estimators.distribution import MpiDistribution, PyTorchDistribution, TensorFlowDistribution
from phalanx.estimators.estimator import Estimator, PyTorch, TensorFlow
from phalanx.estimators.experiment import Experiment
from phalanx.estimators.sweep import GroupRun, HyperDriveConfig

__all__ = [
    "Estimator",
    "Experiment",
    "GroupRun",
    "HyperDriveConfig",
    "MpiDistribution",
    "PyTorch",
    "PyTorchDistribution",
    "TensorFlow",
    "TensorFlowDistribution",
]
