"""Engine name -> Backend, imported lazily so `phalanx run` on this machine never loads an engine's
SDK (the kubernetes client, say) it does not use.

Engines are constructed as ``Engine(settings=settings, cluster=cluster)``: ``settings`` is
``phalanx.config.Settings``, ``cluster`` the ``phalanx.clusters.Cluster`` the user named with
``--cluster`` (None for the local engine).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from phalanx.errors import BackendUnavailable, UsageError

if TYPE_CHECKING:
    from phalanx.backends.base import Backend
    from phalanx.config import Settings

ENGINES: dict[str, str] = {
    "local": "phalanx.backends.local.engine:LocalBackend",
    "slurm": "phalanx.backends.slurm:SlurmBackend",
    "kubernetes": "phalanx.backends.kubernetes:KubernetesBackend",
    "kubeflow": "phalanx.backends.kubeflow:KubeflowBackend",
    "trainer": "phalanx.backends.kubeflow_trainer:TrainerBackend",
    "ray": "phalanx.backends.ray:RayBackend",
}


def engine_class(name: str) -> Any:
    """The engine's class, imported on first use. UsageError for an unknown name."""
    target = ENGINES.get(name)
    if target is None:
        raise UsageError(f"unknown engine {name!r}; known: {', '.join(sorted(ENGINES))}")
    module, _, attr = target.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise BackendUnavailable(f"the {name} engine cannot be loaded: {exc}") from exc


def get_backend(name: str, *, settings: Settings, cluster: Any = None) -> Backend:
    """A ready engine; ``cluster`` is the named cluster's configuration (None on this machine)."""
    cls = engine_class(name)
    backend: Backend = cls(settings=settings, cluster=cluster)
    return backend
