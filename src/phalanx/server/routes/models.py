"""The model registry over REST (phalanx.registry): list and read registered models and their
versions, register an experiment's ONNX model, move aliases, download a version's file, remove a
version or a model.

A model belongs to the project of the experiment it was first registered from: on a team server its
viewers read it (``model:viewer``), its editors add versions, move aliases, edit and remove it
(``model:editor``; not a version a service of the server serves: 409), lists show only the
caller's projects' models, and an outsider gets 404.

Registering re-runs the model's ONNX check on the stored bytes, so a tampered file is refused (400,
with its parity figure). The file is an editor's, so onnxruntime never reads it in the server's
process: the check runs in a short-lived process of its own (``ModelCheckerDep``), in the project's
box when the server boxes the project, else a plain child with nothing of the server's environment;
a file that crashes or hangs it is refused (400) and the server goes on answering. A worker thread
waits for it, one of ``model_check_slots`` (ServerSettings), one of a project at a time: a
registration past them waits for its turn, holding no request thread. A registration whose client
goes away stops: it leaves its queue, or its check's process is killed, and nothing is registered
(once its version is being added, it is added)."""

from __future__ import annotations

import functools
import threading
from collections.abc import Awaitable, Callable

import anyio
from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse
from starlette.concurrency import run_in_threadpool

from phalanx.errors import Conflict, NotFound, QuotaExceeded
from phalanx.registry.checker import CheckStopped
from phalanx.registry.service import Registry
from phalanx.server.audit import describe
from phalanx.server.deps import ModelCheckerDep, StoreDep
from phalanx.server.policy import policy, principal_of, require, require_experiment
from phalanx.server.registry_schemas import (
    AliasIn,
    ModelUpdateIn,
    ModelVersionOut,
    RegisteredModelDetailOut,
    RegisteredModelOut,
    RegisterIn,
)
from phalanx.server.routes.pages import _shell
from phalanx.server.services import Services
from phalanx.store.accounts import Role
from phalanx.store.base import LocalStore
from phalanx.store.registry_records import ModelRef, ModelVersion, check_alias, check_model_name

router = APIRouter(tags=["models"])
# a project's registrations in the server at once: one checking its model, one waiting for its turn
# (a third is refused, 429: the one waiting may wait a whole check, which its client waits for)
PROJECT_CHECKS = 2
CLIENT_POLL_SECONDS = 0.5  # how often a registration looks whether its client is still there
page_router = APIRouter(include_in_schema=False)


@page_router.get("/models")
@policy("signed-in")
def models_page() -> HTMLResponse:
    return _shell()


@page_router.get("/models/{name}")
@policy("signed-in")
def model_page(name: str) -> HTMLResponse:
    return _shell()


@router.get("/models", response_model=list[RegisteredModelOut])
@policy("signed-in")
def list_models(store: StoreDep, request: Request) -> list[RegisteredModelOut]:
    """The registered models of the caller's projects (every one in single-token mode)."""
    visible = principal_of(request).visible_projects()
    return [RegisteredModelOut.of(m) for m in Registry(store).models(visible)]


@router.get("/models/{name}", response_model=RegisteredModelDetailOut)
@policy("model:viewer")
def get_model(name: str, store: StoreDep) -> RegisteredModelDetailOut:
    registry = Registry(store)
    versions = registry.versions(check_model_name(name))
    [model] = [m for m in registry.models() if m.name == name]
    return RegisteredModelDetailOut(
        **RegisteredModelOut.of(model).model_dump(), versions=[ModelVersionOut.of(v) for v in versions]
    )


@router.patch("/models/{name}", response_model=RegisteredModelOut)
@policy("model:editor")
def update_model(name: str, body: ModelUpdateIn, store: StoreDep, request: Request) -> RegisteredModelOut:
    registry = Registry(store)
    registry.update(name, description=body.description, tags=body.tags)
    describe(
        request, "model.update", name, registry.project_of(name), body.model_dump_json(exclude_none=True)
    )
    return RegisteredModelOut.of(next(m for m in registry.models() if m.name == name))


@router.post("/models/{name}/versions", response_model=ModelVersionOut, status_code=201)
@policy("any:editor")
async def register(
    name: str, body: RegisterIn, store: StoreDep, checker: ModelCheckerDep, request: Request
) -> ModelVersionOut:
    """Register an experiment's model; the caller edits that experiment's project and, for a name
    already registered, the model's project too (a new name belongs to the experiment's project).
    Its parity check runs in a process of its own: in the project's box when the server boxes. At
    most ``model_check_slots`` registrations check at once, one of a project at a time; the others
    wait for their turn, holding no request thread (a check may take minutes: a burst of them must
    not stop the server answering, nor hold the other projects' registrations); a project's third
    at once is refused (429). A client that goes away (Ctrl-C, a dropped connection) stops its
    registration: a wait for its turn or its slot ends, a check that runs is killed, nothing is
    registered, and the next registration takes the turn and the slot at once."""
    experiment = await run_in_threadpool(require_experiment, request, body.experiment_id, Role.editor)
    may_add = _model_editor(request, name)
    await run_in_threadpool(_require_model_editor, store, name, may_add)  # before a check is spent
    source = experiment.id if body.model is None else f"{experiment.id}/{body.model}"
    registry = Registry(store, checker)
    # a project's registrations take their turns one at a time: a burst of one project's waits
    # behind itself, not in front of the other projects'; and no more than PROJECT_CHECKS of them
    # are in the server at once, so none waits past what its client waits for (REGISTER_SECONDS)
    held: dict[str, int] = request.app.state.model_checks_held
    project = experiment.project
    if held.get(project, 0) >= PROJECT_CHECKS:
        raise QuotaExceeded(
            f"project {project} already has {PROJECT_CHECKS} model registrations being checked here "
            "(a check may take minutes); register again once one has been answered"
        )
    held[project] = held.get(project, 0) + 1
    stop = threading.Event()  # set when the client goes away: the check's process is then killed
    # kept by the worker thread itself: a version added as its client went away is still audited
    added: list[ModelVersion] = []

    def work() -> None:
        added.append(
            registry.register(
                source, name, description=body.description, tags=body.tags, may_add=may_add, stop=stop
            )
        )

    try:
        await _while_connected(request, stop, functools.partial(_in_turn, request, project, work))
    finally:
        held[project] -= 1
    if not added:  # (nobody reads this answer: its client is gone)
        raise CheckStopped(source)
    [created] = added
    describe(request, "model.register", f"{name}/{created.version}", experiment.project, f"from {source}")
    return ModelVersionOut.of(created)


async def _in_turn(request: Request, project: str, work: Callable[[], None]) -> None:
    """``work`` (a registration) in a worker thread, in ``project``'s turn and one of the server's
    check slots; cancelled, it leaves the queue it waits in (the thread, once started, is waited for:
    its ``stop`` ends it)."""
    turns: dict[str, anyio.Lock] = request.app.state.model_check_turns
    async with turns.setdefault(project, anyio.Lock()):
        await anyio.to_thread.run_sync(work, limiter=request.app.state.model_check_slots)


async def _while_connected(
    request: Request, stop: threading.Event, registering: Callable[[], Awaitable[None]]
) -> None:
    """Await ``registering()`` unless the client goes away first: ``stop`` is then set (a check that
    runs is killed; a version already being added is added) and ``registering`` cancelled (a wait
    for its turn or its slot leaves the queue; a worker thread that runs is waited for). Raises what
    ``registering`` raises."""
    failed: list[Exception] = []
    async with anyio.create_task_group() as group:
        group.start_soon(_until_client_leaves, request, stop, group.cancel_scope)
        try:
            await registering()
        except Exception as exc:  # raised below, as it is (the task group would wrap it in a group)
            failed.append(exc)
        group.cancel_scope.cancel()
    if failed:
        raise failed[0]


async def _until_client_leaves(request: Request, stop: threading.Event, scope: anyio.CancelScope) -> None:
    """Return when the client has gone away (looked at every CLIENT_POLL_SECONDS), setting ``stop``
    and cancelling ``scope``; ``stop`` is set too when this is cancelled (the registration answered,
    or the server is stopping)."""
    try:
        while not await request.is_disconnected():
            await anyio.sleep(CLIENT_POLL_SECONDS)
    finally:
        stop.set()
    scope.cancel()


def _model_editor(request: Request, name: str) -> Callable[[str | None], None]:
    """The rule a version of ``name`` is added under, given the project the name belongs to (None:
    a new name, which becomes its experiment's project's): the caller edits that project. The
    registry applies it again as it adds the version (the name may have been registered meanwhile,
    by another project, while the check ran)."""

    def may_add(project: str | None) -> None:
        if project is not None:
            require(request, project, Role.editor, f"model {name}")

    return may_add


def _require_model_editor(store: LocalStore, name: str, may_add: Callable[[str | None], None]) -> None:
    try:
        project: str | None = Registry(store).project_of(name)
    except NotFound:
        project = None  # a new name
    may_add(project)


@router.delete("/models/{name}", response_model=list[ModelVersionOut])
@policy("model:editor")
def remove_model(name: str, store: StoreDep, request: Request) -> list[ModelVersionOut]:
    """Remove the model with every version and alias (its editors); 409 while a service serves it.
    Answers the versions removed."""
    return _remove(request, Registry(store), name, None)


@router.delete("/models/{name}/versions/{version}", response_model=list[ModelVersionOut])
@policy("model:editor")
def remove_version(name: str, version: int, store: StoreDep, request: Request) -> list[ModelVersionOut]:
    """Remove one version and the aliases naming it (its editors); 409 while a service serves it."""
    return _remove(request, Registry(store), name, version)


def _remove(request: Request, registry: Registry, name: str, version: int | None) -> list[ModelVersionOut]:
    project = registry.project_of(name)
    target = name if version is None else f"{name}/{version}"
    if version is not None:
        registry.resolve(ModelRef(name, version=version))  # NotFound (naming the versions) first
    services: Services = request.app.state.services
    served = {v: ids for v, ids in services.serving(name).items() if version in (None, v)}
    if served:
        said = "; ".join(f"version {v} by service {', '.join(ids)}" for v, ids in sorted(served.items()))
        raise Conflict(
            f"{target} is being served ({said}): stop the service first (the Services page, or "
            "DELETE /api/v1/services/ID); nothing was removed"
        )
    gone = registry.remove(name, version)
    removed = ", ".join(f"{v.name}@{v.version}" + "".join(f" @{a}" for a in v.aliases) for v in gone)
    action = "model.remove" if version is None else "model.version.remove"
    describe(request, action, target, project, removed or "no versions")
    return [ModelVersionOut.of(v) for v in gone]


@router.get("/models/{name}/versions/{version}", response_model=ModelVersionOut)
@policy("model:viewer")
def get_version(name: str, version: int, store: StoreDep) -> ModelVersionOut:
    return ModelVersionOut.of(Registry(store).resolve(ModelRef(check_model_name(name), version=version)))


@router.patch("/models/{name}/versions/{version}", response_model=ModelVersionOut)
@policy("model:editor")
def update_version(
    name: str, version: int, body: ModelUpdateIn, store: StoreDep, request: Request
) -> ModelVersionOut:
    registry = Registry(store)
    registry.update(name, version, description=body.description, tags=body.tags)
    detail = body.model_dump_json(exclude_none=True)
    describe(request, "model.version.update", f"{name}/{version}", registry.project_of(name), detail)
    return ModelVersionOut.of(registry.resolve(ModelRef(name, version=version)))


@router.get("/models/{name}/versions/{version}/file", response_class=Response)
@policy("model:viewer")
def download_version(name: str, version: int, store: StoreDep) -> Response:
    registry = Registry(store)
    found = registry.resolve(ModelRef(check_model_name(name), version=version))
    return Response(
        registry.read_bytes(found),
        media_type="application/octet-stream",
        headers={"content-disposition": f'attachment; filename="{found.name}-v{found.version}.onnx"'},
    )


@router.get("/models/{name}/aliases/{alias}", response_model=ModelVersionOut)
@policy("model:viewer")
def get_alias(name: str, alias: str, store: StoreDep) -> ModelVersionOut:
    ref = ModelRef(check_model_name(name), alias=check_alias(alias))
    return ModelVersionOut.of(Registry(store).resolve(ref))


@router.put("/models/{name}/aliases/{alias}", response_model=ModelVersionOut)
@policy("model:editor")
def set_alias(name: str, alias: str, body: AliasIn, store: StoreDep, request: Request) -> ModelVersionOut:
    registry = Registry(store)
    before = _aliased(registry, name, alias)
    registry.set_alias(name, alias, body.version)
    target, project = f"{name}@{alias}", registry.project_of(name)
    describe(request, "model.alias.set", target, project, f"version {body.version}", before)
    return ModelVersionOut.of(registry.resolve(ModelRef(name, alias=alias)))


@router.delete("/models/{name}/aliases/{alias}", status_code=204)
@policy("model:editor")
def delete_alias(name: str, alias: str, store: StoreDep, request: Request) -> Response:
    registry = Registry(store)
    before = _aliased(registry, name, alias)
    registry.delete_alias(name, alias)
    describe(request, "model.alias.remove", f"{name}@{alias}", registry.project_of(name), None, before)
    return Response(status_code=204)


def _aliased(registry: Registry, name: str, alias: str) -> str | None:
    """The version an alias points at now ("version N"), for the audit trail; None: no such alias."""
    try:
        return f"version {registry.resolve(ModelRef(name, alias=alias)).version}"
    except NotFound:
        return None
