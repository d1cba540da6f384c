"""The model registry: named, versioned ONNX models copied out of experiments, with their lineage
and signature, and aliases (``digits@prod``) that deployments follow (`phalanx serve`).
See docs/models.md."""

from __future__ import annotations

from phalanx.registry.model import Model

__all__ = ["Model"]
