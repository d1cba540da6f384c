"""Phalanx: run and track distributed deep-learning experiments.

The public surface only. The tracking names are imported from the standard-library-only SDK; the
launch API (estimators) is loaded on first use so `import phalanx` inside a replica stays light.
"""

from __future__ import annotations

from phalanx._version import __version__

TYPE_CHECKING = False  # typing is not imported: a replica's reaper imports this package
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "Estimator",
    "Experiment",
    "MpiDistribution",
    "PyTorch",
    "PyTorchDistribution",
    "Run",
    "Task",
    "TensorFlow",
    "TensorFlowDistribution",
    "__version__",
    "log_metrics",
    "metrics_frame",
    "search_experiments",
]

_LAZY = {
    "Task": "phalanx.tracking",
    "log_metrics": "phalanx.tracking",
    "search_experiments": "phalanx.query",
    "metrics_frame": "phalanx.query",
    "Experiment": "phalanx.estimators",
    "Estimator": "phalanx.estimators",
    "PyTorch": "phalanx.estimators",
    "TensorFlow": "phalanx.estimators",
    "PyTorchDistribution": "phalanx.estimators",
    "MpiDistribution": "phalanx.estimators",
    "TensorFlowDistribution": "phalanx.estimators",
}


def __getattr__(name: str) -> Any:
    if name == "Run":
        return _run_class()
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'phalanx' has no attribute {name!r}")
    import importlib  # why: `import phalanx` (the SDK in a replica) loads only what it names

    return getattr(importlib.import_module(module), name)


def _run_class() -> Any:
    """``phalanx.Run``: the submitted-run handle (phalanx.runs), whose ``Run.get_context()`` a
    training script calls; in a replica's own venv, where only the standard-library SDK copy is
    importable, the SDK's class with that same classmethod."""
    try:
        from phalanx.runs import Run  # why: the public surface names the rooms above lazily
    except ImportError:
        from phalanx.tracking.context import Run  # type: ignore[assignment]  # why: the SDK copy has no runs.py
    return Run
