"""What routes get from the app: the store, the settings, the artifact files (FastAPI dependencies)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from phalanx.domain import Experiment
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


def experiment_of(store: Store, experiment_id: str) -> Experiment:
    """The experiment an id (or unique prefix) names; NotFound otherwise (mapped to 404)."""
    return store.get_experiment(experiment_id)
