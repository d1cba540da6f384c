"""The test seam for registering models through the API in tests/unit: a server checks an editor's
ONNX file in a process of its own (phalanx.server.deps.get_model_checker), and tests/unit starts no
process, so the apps of the tests that register a model check it here instead, in this process, as
the embedded mode does. tests/integration keeps the real process (tests/integration/isolation)."""

from __future__ import annotations

from fastapi import FastAPI

from phalanx.registry.checker import check_in_process
from phalanx.server.deps import get_model_checker


def checking_models_in_process(app: FastAPI) -> FastAPI:
    """``app``, its registrations checking models in this process (the test seam); the same app."""
    app.dependency_overrides[get_model_checker] = lambda: check_in_process
    return app
