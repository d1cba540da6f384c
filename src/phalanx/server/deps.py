"""What routes get from the app: the store, the settings, the artifact files, how a registration
checks a model (FastAPI dependencies)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from phalanx.domain import Experiment
from phalanx.registry.checker import ModelChecker
from phalanx.registry.parity_process import ProcessChecker
from phalanx.server.boxing import isolation_for
from phalanx.server.files import ArtifactFiles
from phalanx.server.settings import ServerSettings
from phalanx.store.base import LocalStore, Store


def get_store(request: Request) -> LocalStore:
    store: LocalStore = request.app.state.store
    return store


def get_settings(request: Request) -> ServerSettings:
    settings: ServerSettings = request.app.state.settings
    return settings


def get_files(request: Request) -> ArtifactFiles:
    files: ArtifactFiles = request.app.state.files
    return files


StoreDep = Annotated[LocalStore, Depends(get_store)]
SettingsDep = Annotated[ServerSettings, Depends(get_settings)]
FilesDep = Annotated[ArtifactFiles, Depends(get_files)]


def get_model_checker(settings: SettingsDep) -> ModelChecker:
    """How a registration checks an editor's ONNX file: always in a process of its own, in the
    project's box when the server boxes the project (phalanx.registry.parity_process), never in the
    server's. The test seam: tests/unit (which starts no process) swaps in the in-process checker
    through ``app.dependency_overrides[get_model_checker]`` (tests/unit/server/model_checks.py)."""
    home = settings.store  # (where the server's box policy is kept)
    return ProcessChecker(lambda project: isolation_for(home, project), settings.model_check_seconds)


ModelCheckerDep = Annotated[ModelChecker, Depends(get_model_checker)]


def experiment_of(store: Store, experiment_id: str) -> Experiment:
    """The experiment an id (or unique prefix) names; NotFound otherwise (mapped to 404)."""
    return store.get_experiment(experiment_id)
