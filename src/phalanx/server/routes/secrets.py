"""Project secrets over HTTP: names only out, values only in.

``GET /projects/{project}/secrets`` lists names; ``PUT /projects/{project}/secrets/{name}`` with
``{"value": ...}`` sets one (204, nothing echoed); ``DELETE`` removes it. No route answers a value.
A module of its own, so that a policy (the project's admins) can be attached to it alone.
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, Field

from phalanx.server.audit import describe
from phalanx.server.deps import SettingsDep, StoreDep
from phalanx.server.policy import policy
from phalanx.store import secrets

router = APIRouter(tags=["secrets"])


class SecretIn(BaseModel):
    value: str = Field(max_length=64 * 1024, description="kept encrypted; never answered back")


class SecretOut(BaseModel):
    project: str
    name: str
    updated_at: float


@router.get("/projects/{project}/secrets", response_model=list[SecretOut])
@policy("project:editor")
def list_secrets(project: str, store: StoreDep) -> list[SecretOut]:
    """The project's secrets by name (the values are never answered)."""
    return [SecretOut(project=p, name=n, updated_at=t) for p, n, t in secrets.names(store, project)]


@router.put("/projects/{project}/secrets/{name}", status_code=204)
@policy("project:admin")
def put_secret(
    project: str, name: str, body: SecretIn, store: StoreDep, settings: SettingsDep, request: Request
) -> Response:
    """Set (replace) a secret; the project's experiments started on this machine from now on get it
    as the environment variable ``name``."""
    replaced = any(n == name for _, n, _ in secrets.names(store, project))
    secrets.put(store, settings.store.home, project, name, body.value)
    # never the value: whether one was replaced
    describe(request, "secret.set", f"{project}/{name}", project, "replaced" if replaced else "new")
    return Response(status_code=204)


@router.delete("/projects/{project}/secrets/{name}", status_code=204)
@policy("project:admin")
def delete_secret(project: str, name: str, store: StoreDep, request: Request) -> Response:
    """Remove a secret (404 when the project has none of that name, or, on a team server, for a
    project it does not know)."""
    secrets.remove(store, project, name)
    describe(request, "secret.remove", f"{project}/{name}", project)
    return Response(status_code=204)
