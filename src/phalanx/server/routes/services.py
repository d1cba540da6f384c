"""Services over HTTP (docs/services.md): ``POST /services`` starts (or hands back) a TensorBoard
for an experiment, a group or a project; ``GET /services`` lists the caller's projects' ones;
``GET``/``DELETE /services/{service_id}``; and ``/services/{service_id}/...`` (outside the API's
prefix, for the browser) is the service itself, through the proxy.

A project's viewers start, reach and stop its TensorBoards; somebody in none of its roles gets 404
for each, as for its experiments.
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, HTTPException, Request, Response
from fastapi.responses import RedirectResponse
from pydantic import BaseModel, Field, model_validator

from phalanx.errors import NotFound
from phalanx.server.audit import describe
from phalanx.server.deps import StoreDep
from phalanx.server.policy import policy, principal_of, require, require_experiment
from phalanx.server.proxy import forward
from phalanx.server.services import Service, Services
from phalanx.services.boards import Target
from phalanx.store.accounts import Role
from phalanx.store.base import ExperimentFilter

router = APIRouter(tags=["services"])
page_router = APIRouter(include_in_schema=False)

PROXIED = ["GET", "POST", "HEAD"]


class ServiceIn(BaseModel):
    kind: Literal["tensorboard"] = "tensorboard"
    experiment: str | None = Field(default=None, max_length=64, description="an experiment's id (or prefix)")
    group: str | None = Field(default=None, max_length=64, description="a group's id (or prefix): its trials")
    project: str | None = Field(default=None, max_length=128, description="a project: its newest experiments")

    @model_validator(mode="after")
    def _one_target(self) -> ServiceIn:
        given = [k for k in ("experiment", "group", "project") if getattr(self, k)]
        if len(given) != 1:
            raise ValueError("give exactly one of experiment, group or project")
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
    require(request, project, Role.viewer, f"project {project!r}")
    if not store.list_experiments(ExperimentFilter(project=project, limit=1)).items:
        raise NotFound(f"project {project!r} has no experiment: a TensorBoard of it would show nothing")
    return project, Target("project", project)


@router.post("/services", response_model=ServiceOut)
@policy("body")
def start_service(body: ServiceIn, store: StoreDep, request: Request, response: Response) -> ServiceOut:
    """The TensorBoard of an experiment, a group or a project: started, or the one that runs."""
    who = principal_of(request)
    if who.replica_of is not None:
        raise HTTPException(
            403, f"this is a replica token of experiment {who.replica_of}: it only sends its records"
        )
    project, target = _target(request, store, body)
    service, started = services_of(request).tensorboard(project, target, who.name)
    response.status_code = 201 if started else 200
    if started:  # handing back the one that runs changes nothing
        describe(request, "service.start", service.id, project, f"tensorboard of {target.kind} {target.id}")
    return _out(service, started)


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
    """Stop it now (else it stops once nobody reached it for the server's idle time)."""
    service = services_of(request).stop(service_id)
    describe(request, "service.stop", service.id, service.project, f"{service.kind} of {service.target.kind}")
    return _out(service)


@page_router.get("/services/{service_id}")
@policy("service:viewer")
def service_root(service_id: str) -> RedirectResponse:
    return RedirectResponse(f"/services/{service_id}/", status_code=307)


@page_router.api_route("/services/{service_id}/{path:path}", methods=PROXIED)
@policy("service:viewer")
async def proxied(service_id: str, path: str, request: Request) -> Response:
    """The service's own pages and data, forwarded to its socket (phalanx.server.proxy)."""
    services = services_of(request)
    service = services.get(service_id)
    services.touch(service)
    return await forward(request, str(service.socket))
