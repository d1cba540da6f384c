"""The model registry: named, versioned ONNX models copied out of experiments, with their lineage
and signature, and aliases (``digits@prod``) that deployments follow (`phalanx serve`).
See docs/models.md."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from phalanx.registry.model import Model

__all__ = ["Model"]


def __getattr__(name: str) -> Any:
    if name == "Model":
        from phalanx.registry.model import Model

        return Model
    raise AttributeError(f"module 'phalanx.registry' has no attribute {name!r}")
