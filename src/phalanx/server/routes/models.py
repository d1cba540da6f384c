"""The model registry over REST (phalanx.registry): list and read registered models and their
versions, register an experiment's ONNX model, move aliases, download a version's file.

Registering re-runs the model's ONNX check on the stored bytes (onnxruntime, in a worker thread:
these routes are plain ``def``), so a tampered file is refused (400, with its parity figure)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse

from phalanx.registry.records import ModelRef, check_alias, check_model_name
from phalanx.registry.service import Registry
from phalanx.server.deps import StoreDep
from phalanx.server.policy import policy, require_experiment
from phalanx.server.registry_schemas import (
    AliasIn,
    ModelUpdateIn,
    ModelVersionOut,
    RegisteredModelDetailOut,
    RegisteredModelOut,
    RegisterIn,
)
from phalanx.store.accounts import Role

router = APIRouter(tags=["models"])
page_router = APIRouter(include_in_schema=False)


@page_router.get("/models")
@policy("signed-in")
def models_page() -> HTMLResponse:
    from phalanx.server.routes.pages import _shell

    return _shell()


@page_router.get("/models/{name}")
@policy("signed-in")
def model_page(name: str) -> HTMLResponse:
    from phalanx.server.routes.pages import _shell

    return _shell()


@router.get("/models", response_model=list[RegisteredModelOut])
@policy("signed-in")
def list_models(store: StoreDep) -> list[RegisteredModelOut]:
    return [RegisteredModelOut.of(m) for m in Registry(store).models()]


@router.get("/models/{name}", response_model=RegisteredModelDetailOut)
@policy("signed-in")
def get_model(name: str, store: StoreDep) -> RegisteredModelDetailOut:
    registry = Registry(store)
    versions = registry.versions(check_model_name(name))
    [model] = [m for m in registry.models() if m.name == name]
    return RegisteredModelDetailOut(
        **RegisteredModelOut.of(model).model_dump(), versions=[ModelVersionOut.of(v) for v in versions]
    )


@router.patch("/models/{name}", response_model=RegisteredModelOut)
@policy("any:editor")
def update_model(name: str, body: ModelUpdateIn, store: StoreDep) -> RegisteredModelOut:
    registry = Registry(store)
    registry.update(name, description=body.description, tags=body.tags)
    return RegisteredModelOut.of(next(m for m in registry.models() if m.name == name))


@router.post("/models/{name}/versions", response_model=ModelVersionOut, status_code=201)
@policy("any:editor")
def register(name: str, body: RegisterIn, store: StoreDep, request: Request) -> ModelVersionOut:
    """Register an experiment's model; the caller edits that experiment's project."""
    require_experiment(request, body.experiment_id, Role.editor)
    source = body.experiment_id if body.model is None else f"{body.experiment_id}/{body.model}"
    created = Registry(store).register(source, name, description=body.description, tags=body.tags)
    return ModelVersionOut.of(created)


@router.get("/models/{name}/versions/{version}", response_model=ModelVersionOut)
@policy("signed-in")
def get_version(name: str, version: int, store: StoreDep) -> ModelVersionOut:
    return ModelVersionOut.of(Registry(store).resolve(ModelRef(check_model_name(name), version=version)))


@router.patch("/models/{name}/versions/{version}", response_model=ModelVersionOut)
@policy("any:editor")
def update_version(name: str, version: int, body: ModelUpdateIn, store: StoreDep) -> ModelVersionOut:
    registry = Registry(store)
    registry.update(name, version, description=body.description, tags=body.tags)
    return ModelVersionOut.of(registry.resolve(ModelRef(name, version=version)))


@router.get("/models/{name}/versions/{version}/file", response_class=Response)
@policy("signed-in")
def download_version(name: str, version: int, store: StoreDep) -> Response:
    registry = Registry(store)
    found = registry.resolve(ModelRef(check_model_name(name), version=version))
    return Response(
        registry.read_bytes(found),
        media_type="application/octet-stream",
        headers={"content-disposition": f'attachment; filename="{found.name}-v{found.version}.onnx"'},
    )


@router.get("/models/{name}/aliases/{alias}", response_model=ModelVersionOut)
@policy("signed-in")
def get_alias(name: str, alias: str, store: StoreDep) -> ModelVersionOut:
    ref = ModelRef(check_model_name(name), alias=check_alias(alias))
    return ModelVersionOut.of(Registry(store).resolve(ref))


@router.put("/models/{name}/aliases/{alias}", response_model=ModelVersionOut)
@policy("any:editor")
def set_alias(name: str, alias: str, body: AliasIn, store: StoreDep) -> ModelVersionOut:
    registry = Registry(store)
    registry.set_alias(name, alias, body.version)
    return ModelVersionOut.of(registry.resolve(ModelRef(name, alias=alias)))


@router.delete("/models/{name}/aliases/{alias}", status_code=204)
@policy("any:editor")
def delete_alias(name: str, alias: str, store: StoreDep) -> Response:
    Registry(store).delete_alias(name, alias)
    return Response(status_code=204)
