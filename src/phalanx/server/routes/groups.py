"""Experiment groups (hyperparameter searches): list, detail with trials and the best one, stop,
delete; and the UI's /groups pages. Read through the store's ``GroupStore`` methods, as the group
controller writes them."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from phalanx.domain import plural
from phalanx.groups import controller
from phalanx.groups.ending import remove_folders
from phalanx.ids import check_destructive
from phalanx.server.audit import describe
from phalanx.server.deps import SettingsDep, StoreDep
from phalanx.server.policy import policy, principal_of, typed_id
from phalanx.server.routes.pages import _shell

router = APIRouter(tags=["groups"])
page_router = APIRouter(include_in_schema=False)


@router.get("/groups")
@policy("signed-in")
def list_groups(
    store: StoreDep, request: Request, limit: Annotated[int, Query(ge=1, le=500)] = 50
) -> list[dict[str, Any]]:
    """Groups, newest first, with how many trials each has started (of the caller's projects)."""
    return store.group_views(limit, projects=principal_of(request).visible_projects())


@router.get("/groups/{group_id}")
@policy("group:viewer")
def get_group(store: StoreDep, group_id: str) -> dict[str, Any]:
    """One group: its search, every trial (experiment id, params, state, metric) and the best trial."""
    return store.group_view(group_id)


@router.post("/groups/{group_id}/stop")
@policy("group:editor")
def stop_group(store: StoreDep, settings: SettingsDep, group_id: str, request: Request) -> dict[str, Any]:
    """Stop a group as `phalanx group stop` does: no new trial starts and every running trial is
    stopped (by its controller, or here when none runs). Returns the group after; a finished group
    is returned unchanged; 400 for a prefix shorter than 8 characters (as an experiment's stop)."""
    group = store.get_group(group_id)
    check_destructive(typed_id(request, group_id), group.id, "stop", kind="group")
    if not group.done:
        controller.stop_group(store, settings.store, group, timeout=30)
        describe(request, "group.stop", group.id, group.project)
    return store.group_view(group.id)


@router.delete("/groups/{group_id}")
@policy("group:admin")
def delete_group(store: StoreDep, settings: SettingsDep, group_id: str, request: Request) -> dict[str, Any]:
    """Delete an ended group with its trials' experiments and all they reported, all or nothing
    (as `phalanx group delete`): 409 while it or one of them runs (stop it first); 400 for a prefix
    shorter than 8 characters. Returns ``{"group": ID, "deleted": [experiment ids]}``."""
    group = store.get_group(group_id)
    check_destructive(typed_id(request, group_id), group.id, kind="group")
    deleted = store.remove_group(group.id)
    remove_folders(settings.store, group.id, deleted)  # the server's home: nothing left behind
    describe(request, "group.delete", group.id, group.project, plural(len(deleted), "experiment"))
    return {"group": group.id, "deleted": deleted}


@page_router.get("/groups")
@policy("signed-in")
def groups_page() -> HTMLResponse:
    return _shell()


@page_router.get("/groups/{group_id}")
@policy("signed-in")  # the shell holds no data: the API it calls checks the role
def group_page(group_id: str) -> HTMLResponse:
    return _shell()
