"""Services over HTTP (docs/services.md): ``POST /services`` starts (or hands back) a TensorBoard
for an experiment, a group or a project, or a project's notebook server; ``GET /services`` lists
the caller's projects' ones; ``GET``/``DELETE /services/{service_id}`` read or stop one; and
``/services/{service_id}/...`` (outside the API's prefix, for the browser; WebSockets too) is the
service itself, through the proxy.

A project's viewers start, reach and stop its TensorBoards, its editors its notebooks (code runs
there); somebody in none of its roles gets 404 for each, as for its experiments.
"""

from __future__ import annotations

import base64
from typing import Annotated, Literal

from fastapi import APIRouter, HTTPException, Request, Response, WebSocket
from fastapi.responses import RedirectResponse
from pydantic import BaseModel, ConfigDict, Field, model_validator

from phalanx import bundles
from phalanx.data import inputs as data_inputs
from phalanx.domain import ExperimentFilter, Range, Resources
from phalanx.errors import NotFound, UsageError
from phalanx.machine.handoff import NAME as ENV_NAME
from phalanx.server.audit import describe
from phalanx.server.auth import BEARER, SESSION, credential_of, session_cookie
from phalanx.server.deps import StoreDep
from phalanx.server.policy import policy, principal_of, require, require_experiment, require_project
from phalanx.server.proxy import POLICY_VIOLATION, forward, forward_socket
from phalanx.server.service_origin import entry_url
from phalanx.server.service_passes import ServiceOrigin
from phalanx.server.service_record import MAX_REPLICAS, MODEL, NOTEBOOK, Service
from phalanx.server.services import Services
from phalanx.server.settings import ServerSettings
from phalanx.services.targets import Target
from phalanx.spec.inputs import parse_inputs
from phalanx.spec.model import Build
from phalanx.store.accounts import Role
from phalanx.store.registry import registry_store
from phalanx.store.registry_records import parse_ref

router = APIRouter(tags=["services"])
page_router = APIRouter(include_in_schema=False)

PROXIED = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"]  # a notebook saves, renames, deletes


class BuildIn(BaseModel):
    """A `kind: notebook` file's ``build:``: its kernels' environment, built as an experiment's."""

    model_config = ConfigDict(extra="forbid")

    pip_packages: list[Annotated[str, Field(max_length=1000)]] = Field(default_factory=list, max_length=200)
    requirements: str | None = Field(
        default=None, max_length=256 * 1024, description="the requirements file's text (not its path)"
    )
    build_steps: list[Annotated[str, Field(max_length=10_000)]] = Field(default_factory=list, max_length=64)
    env_vars: dict[str, str] = Field(default_factory=dict, max_length=64)

    @model_validator(mode="after")
    def _passable(self) -> BuildIn:
        for name in self.env_vars:
            if not ENV_NAME.fullmatch(name):
                raise ValueError(f"env_vars: {name!r} is not a variable name (letters, digits, '_')")
        texts = [*self.pip_packages, *self.build_steps, *self.env_vars.values(), self.requirements or ""]
        if any("\0" in text for text in texts):
            raise ValueError("build: a NUL character cannot be passed to a program")
        return self

    def as_build(self) -> Build:
        return Build(
            pip_packages=tuple(self.pip_packages),
            build_steps=tuple(self.build_steps),
            env_vars=dict(self.env_vars),
        )


class RangeIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    requests: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    limits: float | None = Field(default=None, gt=0, allow_inf_nan=False)

    @model_validator(mode="after")
    def _ordered(self) -> RangeIn:
        if self.requests is not None and self.limits is not None and self.limits < self.requests:
            raise ValueError("limits must be at least the requests")
        return self


class ResourcesIn(BaseModel):
    """A `kind: notebook` file's ``environment: resources:``: cores, MiB of memory, GPUs."""

    model_config = ConfigDict(extra="forbid")

    cpu: RangeIn = Field(default_factory=RangeIn)
    memory: RangeIn = Field(default_factory=RangeIn, description="in MiB")
    gpu: RangeIn = Field(default_factory=RangeIn)

    @model_validator(mode="after")
    def _whole_gpus(self) -> ResourcesIn:
        if any(v is not None and not float(v).is_integer() for v in (self.gpu.requests, self.gpu.limits)):
            raise ValueError("gpu: whole devices (a GPU is not shared)")
        return self

    def as_resources(self) -> Resources:
        def of(r: RangeIn) -> Range:
            return Range(r.requests, r.limits)

        return Resources(of(self.cpu), of(self.memory), of(self.gpu))


class ServiceIn(BaseModel):
    kind: Literal["tensorboard", "notebook", "model"] = "tensorboard"
    experiment: str | None = Field(default=None, max_length=64, description="an experiment's id (or prefix)")
    group: str | None = Field(default=None, max_length=64, description="a group's id (or prefix): its trials")
    project: str | None = Field(
        default=None, max_length=128, description="a project: its newest experiments; a notebook's project"
    )
    model: str | None = Field(
        default=None, max_length=200, description="a served model's NAME@alias (followed), NAME@N or NAME"
    )
    replicas: int = Field(
        default=1,
        ge=1,
        le=MAX_REPLICAS,
        strict=True,  # a number, not "2" nor true
        description="a served model's processes behind its one address, taking turns at its requests",
    )
    inputs: list[dict[str, str]] = Field(
        default_factory=list,
        max_length=32,
        description="a notebook's inputs, as an experiment file's `inputs:` (name and dataset or datastore)",
    )

    build: BuildIn | None = Field(
        default=None, description="a notebook's kernels' environment, as a `kind: notebook` file's build:"
    )

    code: str | None = Field(
        default=None,
        description="a notebook's code: the submitter's folder as a .tar.gz (as a submit's bundle), base64;"
        " unpacked into the project's notebook folder's code/",
    )
    resources: ResourcesIn | None = Field(
        default=None,
        description="what a notebook (or each replica of a served model) takes of the machine's ledger"
        " while it runs (409 when there is no room now)",
    )

    @model_validator(mode="after")
    def _one_target(self) -> ServiceIn:
        if self.kind != "notebook" and (self.build is not None or self.code is not None):
            raise ValueError("build and code are a notebook's: its kernels' environment and its files")
        if self.kind == "tensorboard" and self.resources is not None:
            raise ValueError(
                "resources are a notebook's or a served model's (each replica's); a board has none"
            )
        given = [k for k in ("experiment", "group", "project", "model") if getattr(self, k)]
        if self.kind == "model":
            if given != ["model"]:
                raise ValueError("a served model names its model only: give model (NAME@alias)")
            return self
        if self.replicas != 1:
            raise ValueError("replicas are a served model's; a board or a notebook runs once")
        if len(given) != 1 or given == ["model"]:
            raise ValueError("give exactly one of experiment, group or project")
        if self.kind == "notebook" and given != ["project"]:
            raise ValueError("a notebook is a project's: give project")
        if self.kind == "tensorboard" and self.inputs:
            raise ValueError("inputs are a notebook's; a TensorBoard reads what its experiments recorded")
        return self


class TargetOut(BaseModel):
    kind: str
    id: str


class ServiceOut(BaseModel):
    id: str
    kind: str
    project: str
    target: TargetOut
    path: str = Field(description="where it answers on this server: /services/ID/")
    started_by: str
    started_at: float
    idle_seconds: float
    restarts: int = Field(
        default=0, description="a served model's: how often one of its processes was started again"
    )
    replicas: int = Field(default=1, description="its processes behind its one address")
    environment: str | None = Field(
        default=None, description="a notebook's kernels' build environment (none: Phalanx's own)"
    )
    holds: str | None = Field(
        default=None, description="what a notebook holds of the machine (its cores, GPUs, memory)"
    )
    started: bool = Field(default=False, description="this request started it (else it was running)")


def services_of(request: Request) -> Services:
    found: Services = request.app.state.services
    return found


def _out(service: Service, started: bool = False) -> ServiceOut:
    return ServiceOut.model_validate({**service.to_json(), "started": started})


def _target(request: Request, store: StoreDep, body: ServiceIn) -> tuple[str, Target]:
    """(the project, the target) the body names, once the caller may view it (404 when not)."""
    who = principal_of(request)
    if body.experiment:
        experiment = require_experiment(request, body.experiment, Role.viewer)
        return experiment.project, Target("experiment", experiment.id)
    if body.group:
        group = store.get_group(store.resolve_group(body.group, projects=who.visible_projects()))
        require(request, group.project, Role.viewer, f"group {body.group}")
        return group.project, Target("group", group.id)
    project = str(body.project)
    if body.kind == NOTEBOOK:  # code runs in it: the project's editors
        require_project(request, project, Role.editor)
        settings: ServerSettings = request.app.state.settings
        if not settings.notebooks:
            raise HTTPException(
                403,
                "this server runs no notebooks: its admin turns them on with `phalanx server --notebooks`"
                " (without --service-origin a notebook's pages run on the server's origin: docs/services.md"
                " says what that means)",
            )
        return project, Target("project", project)
    require_project(request, project, Role.viewer)
    if not store.list_experiments(ExperimentFilter(project=project, limit=1)).items:
        raise NotFound(f"project {project!r} has no experiment: a TensorBoard of it would show nothing")
    return project, Target("project", project)


@router.post("/services", response_model=ServiceOut)
@policy("body")
def start_service(body: ServiceIn, store: StoreDep, request: Request, response: Response) -> ServiceOut:
    """The TensorBoard of an experiment, a group or a project, or a project's notebook server:
    started, or the one that runs."""
    who = principal_of(request)
    if who.replica_of is not None:
        raise HTTPException(
            403, f"this is a replica token of experiment {who.replica_of}: it only sends its records"
        )
    services = services_of(request)
    if body.kind == MODEL:
        ref = parse_ref(str(body.model))
        project = registry_store(store).model_project(ref.name)  # an unknown model: its NotFound
        require(request, project, Role.editor, f"model {ref.name}")
        resources = body.resources.as_resources() if body.resources else None
        service, started = services.model(ref, who.name, body.replicas, resources)
        response.status_code = 201 if started else 200
        if started:
            describe(request, "service.start", service.id, project, f"model {ref}")
        return _out(service, started)
    project, target = _target(request, store, body)
    if body.kind == NOTEBOOK:
        inputs = _inputs(request, project, body.inputs)
        code = _code(body.code)
        resources = body.resources.as_resources() if body.resources else None
        python = None
        built = body.build
        if built is not None and services.running(NOTEBOOK, target) is None:  # built once it can run
            services.check_fits(project, resources, f"notebook of project {project}")
            python = services.environment(project, built.as_build(), built.requirements)
        service, started = services.notebook(project, inputs, who.name, python, resources, code)
    else:
        service, started = services.tensorboard(project, target, who.name)
    response.status_code = 201 if started else 200
    if started:  # handing back the one that runs changes nothing
        describe(request, "service.start", service.id, project, f"{body.kind} of {target.kind} {target.id}")
    return _out(service, started)


def _code(given: str | None) -> bytes | None:
    """The notebook's code bundle, checked as a submit's is before anything runs (UsageError)."""
    if given is None:
        return None
    try:
        data = base64.b64decode(given, validate=True)
    except ValueError:
        raise UsageError("code: not base64 (send the .tar.gz bundle base64-encoded)") from None
    bundles.check(data)
    return data


def _inputs(request: Request, project: str, given: list[dict[str, str]]) -> dict[str, str]:
    """The environment that names a notebook's inputs' folders, fetched as an experiment's of
    ``project`` are: its own and shared data only, read with its own credentials."""
    settings: ServerSettings = request.app.state.settings
    env, _ = data_inputs.resolve(parse_inputs(given, "inputs"), settings.store, reader=project)
    return env


@router.get("/services", response_model=list[ServiceOut])
@policy("signed-in")
def list_services(request: Request) -> list[ServiceOut]:
    """The running services of the caller's projects, oldest first."""
    found = services_of(request).listed(principal_of(request).visible_projects())
    return [_out(s) for s in found]


@router.get("/services/{service_id}", response_model=ServiceOut)
@policy("service:viewer")
def get_service(service_id: str, request: Request) -> ServiceOut:
    return _out(services_of(request).get(service_id))


@router.delete("/services/{service_id}", response_model=ServiceOut)
@policy("service:viewer")
def stop_service(service_id: str, request: Request) -> ServiceOut:
    """Stop it now (else a board or a notebook stops once nobody reached it for the server's idle
    time); a notebook's or a served model's editors stop it, a board's viewers."""
    services = services_of(request)
    found = services.get(service_id)
    require(request, found.project, found.manage_role, f"service {service_id}")
    service = services.stop(service_id)
    describe(request, "service.stop", service.id, service.project, f"{service.kind} of {service.target.kind}")
    return _out(service)


@page_router.get("/services/{service_id}")
@policy("service:viewer")
def service_root(service_id: str) -> RedirectResponse:
    return RedirectResponse(f"/services/{service_id}/", status_code=307)


@page_router.api_route("/services/{service_id}/{path:path}", methods=PROXIED)
@policy("service:viewer")
async def proxied(service_id: str, path: str, request: Request) -> Response:
    """The service's own pages and data, forwarded to its socket (phalanx.server.proxy); with
    --service-origin, a browser's page is sent to the service's own origin with a ticket, and only a
    script's request (a bearer token: no page of a service can send one) is forwarded here."""
    services = services_of(request)
    service = services.get(service_id)
    origin: ServiceOrigin | None = request.app.state.service_origin
    if origin is not None and credential_of(request.scope) != BEARER:
        if request.method not in ("GET", "HEAD"):
            raise HTTPException(403, f"service {service_id} is served at its own origin, not here")
        session = session_cookie(request.scope) if credential_of(request.scope) == SESSION else None
        ticket = request.app.state.passes.ticket(service_id, principal_of(request).user, session)
        return RedirectResponse(entry_url(origin, request, service_id, ticket), status_code=303)
    services.touch(service)
    return await forward(request, service.in_turn())


async def proxied_socket(websocket: WebSocket) -> None:
    """A service's WebSocket (a notebook's kernel channels): the caller's role in its project checked
    here (the app's policy dependency does not run for WebSockets; the auth middleware has said who
    this is), then joined to the service's socket (phalanx.server.proxy). Refused before it is
    accepted (403) for a caller below the service's role, or with no service of that id."""
    services: Services = websocket.app.state.services
    who = principal_of(websocket)
    try:
        service = services.get(str(websocket.path_params["service_id"]))
    except NotFound:
        await websocket.close(code=POLICY_VIOLATION)
        return
    held = None if who.replica_of is not None else who.role_in(service.project)
    elsewhere = websocket.app.state.service_origin is not None  # then a browser's goes there
    if held is None or held < service.role or (elsewhere and credential_of(websocket.scope) != BEARER):
        await websocket.close(code=POLICY_VIOLATION)
        return
    services.touch(service)
    await forward_socket(websocket, str(service.in_turn()[0]), lambda: services.touch(service))
