"""A project's alert hooks over HTTP (docs/alerts.md): ``GET``/``POST /projects/{project}/alerts``,
``GET /alerts`` (the caller's projects'), ``DELETE /alerts/{hook_id}`` and
``GET /alerts/{hook_id}/deliveries``.

Its editors add and remove hooks (they already decide what the project's code sends anywhere); its
viewers see them and their delivery log, with a hook's URL cut to its host (an incoming webhook's
path is its credential). A hook's secret is answered once, to whoever created it.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel, Field

from phalanx.errors import UsageError
from phalanx.server.audit import describe
from phalanx.server.deps import StoreDep
from phalanx.server.hook_guard import HookGuard, HookRefused
from phalanx.server.policy import policy, principal_of
from phalanx.store.accounts import Role
from phalanx.store.alert_records import EVENTS, SECRET_MAX, URL_MAX, Delivery, Hook, shown_url
from phalanx.store.alerts import alert_book

router = APIRouter(tags=["alerts"])


class HookIn(BaseModel):
    url: str = Field(max_length=URL_MAX, description="the receiver: an http:// or https:// address")
    events: list[Annotated[str, Field(max_length=32)]] = Field(
        max_length=len(EVENTS), description=f"the events it is told about: {', '.join(EVENTS)}"
    )
    secret: str | None = Field(
        default=None,
        max_length=SECRET_MAX,
        description="signs each body (HMAC-SHA256); none: the server makes one",
    )


class HookOut(BaseModel):
    id: str
    project: str
    url: str
    events: list[str]
    created_by: str | None
    created_at: float
    secret: str | None = Field(default=None, description="only in the answer that created the hook")


class AttemptOut(BaseModel):
    number: int
    at: float
    status_code: int | None
    error: str | None


class DeliveryOut(BaseModel):
    id: str
    hook_id: str
    experiment_id: str | None = Field(default=None, description="the experiment it is about, or None")
    group_id: str | None = Field(default=None, description="the group it is about, or None")
    model: str | None = Field(default=None, description="the registered model whose alias moved, or None")
    event: str
    state: str = Field(description="pending, delivered, failed (every try used) or dropped (hook removed)")
    created_at: float
    finished_at: float | None
    attempts: list[AttemptOut]


def _out(hook: Hook, full_url: bool) -> HookOut:
    doc = hook.to_json()
    if not full_url:
        doc["url"] = shown_url(hook.url)
    return HookOut(**doc)


@router.get("/projects/{project}/alerts", response_model=list[HookOut])
@policy("project:viewer")
def list_hooks(project: str, store: StoreDep, request: Request) -> list[HookOut]:
    """The project's hooks (never their secrets; a viewer sees each URL's host only)."""
    full = (principal_of(request).role_in(project) or Role.viewer) >= Role.editor
    return [_out(h, full) for h in alert_book(store).hooks([project])]


@router.get("/alerts", response_model=list[HookOut])
@policy("signed-in")
def list_all_hooks(store: StoreDep, request: Request) -> list[HookOut]:
    """The hooks of every project the caller is a member of (a server admin: all of them)."""
    who = principal_of(request)
    hooks = alert_book(store).hooks(who.visible_projects())
    return [_out(h, (who.role_in(h.project) or Role.viewer) >= Role.editor) for h in hooks]


@router.post("/projects/{project}/alerts", response_model=HookOut, status_code=201)
@policy("project:editor")
def add_hook(project: str, body: HookIn, store: StoreDep, request: Request) -> HookOut:
    """Add a hook: from now on, each end of the project's experiments it names is POSTed to it."""
    who = principal_of(request)
    try:  # an address given outright; where a name points is checked on every send
        HookGuard.allowing(request.app.state.settings.hook_allow).check_literal(body.url)
    except HookRefused as exc:
        raise UsageError(f"url {shown_url(body.url)}: {exc}") from None
    hook = alert_book(store).add_hook(project, body.url, body.events, body.secret, who.name)
    describe(request, "alert.add", hook.id, project, f"{shown_url(hook.url)} on {','.join(hook.events)}")
    return _out(hook, True)


@router.delete("/alerts/{hook_id}", status_code=204)
@policy("alert:editor")
def remove_hook(hook_id: str, store: StoreDep, request: Request) -> Response:
    """Remove a hook, with its delivery log; what it had not been delivered yet is never sent."""
    book = alert_book(store)
    hook = book.hook(hook_id)
    book.remove_hook(hook_id)
    describe(request, "alert.remove", hook_id, hook.project, shown_url(hook.url))
    return Response(status_code=204)


@router.get("/alerts/{hook_id}/deliveries", response_model=list[DeliveryOut])
@policy("alert:viewer")
def list_deliveries(
    hook_id: str, store: StoreDep, limit: Annotated[int, Query(ge=1, le=500)] = 50
) -> list[DeliveryOut]:
    """The hook's newest deliveries first, each with its tries (when, the receiver's status, why)."""
    return [_delivery(d) for d in alert_book(store).deliveries(hook_id, limit)]


def _delivery(d: Delivery) -> DeliveryOut:
    return DeliveryOut(**d.to_json())
