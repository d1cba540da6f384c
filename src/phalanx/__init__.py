"""Phalanx: run and track distributed deep-learning experiments.

The public surface only. The tracking names are imported from the standard-library-only SDK; the
launch API (estimators) is loaded on first use so `import phalanx` inside a replica stays light.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

__all__ = [
    "Estimator",
    "Experiment",
    "MpiDistribution",
    "PyTorch",
    "PyTorchDistribution",
    "Task",
    "TensorFlow",
    "TensorFlowDistribution",
    "__version__",
    "log_metrics",
    "search_experiments",
]

_LAZY = {
    "Task": "phalanx.tracking",
    "log_metrics": "phalanx.tracking",
    "search_experiments": "phalanx.query",
    "Experiment": "phalanx.estimators",
    "Estimator": "phalanx.estimators",
    "PyTorch": "phalanx.estimators",
    "TensorFlow": "phalanx.estimators",
    "PyTorchDistribution": "phalanx.estimators",
    "MpiDistribution": "phalanx.estimators",
    "TensorFlowDistribution": "phalanx.estimators",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'phalanx' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
