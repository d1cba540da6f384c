"""Experiment groups (hyperparameter searches): list, detail with trials and the best one, stop;
and the UI's /groups pages. Read from the tables the group controller writes (groups.records)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import HTMLResponse

from phalanx.server.deps import SettingsDep, StoreDep

router = APIRouter(tags=["groups"])
page_router = APIRouter(include_in_schema=False)


@router.get("/groups")
def list_groups(store: StoreDep, limit: Annotated[int, Query(ge=1, le=500)] = 50) -> list[dict[str, Any]]:
    """Groups, newest first, with how many trials each has started."""
    from phalanx.groups import records

    sql: Any = store
    return [
        {**g.to_json(), "trials": records.count_trials(sql, g.id)}
        for g in records.list_groups(sql, limit=limit)
    ]


@router.get("/groups/{group_id}")
def get_group(store: StoreDep, group_id: str) -> dict[str, Any]:
    """One group: its search, every trial (experiment id, params, state, metric) and the best trial."""
    from phalanx.groups import records
    from phalanx.groups.controller import group_json

    sql: Any = store
    return group_json(sql, records.get_group(sql, group_id))


@router.post("/groups/{group_id}/stop")
def stop_group(store: StoreDep, settings: SettingsDep, group_id: str) -> dict[str, Any]:
    """Stop a group as `phalanx group stop` does: no new trial starts and every running trial is
    stopped (by its controller, or here when none runs). Returns the group after; a finished group
    is returned unchanged."""
    from phalanx.groups import controller, records

    sql: Any = store
    group = records.get_group(sql, group_id)
    if not group.done:
        controller.stop_group(sql, settings.store, group, timeout=30)
    return controller.group_json(sql, records.get_group(sql, group.id))


@page_router.get("/groups")
def groups_page() -> HTMLResponse:
    from phalanx.server.routes.pages import _shell

    return _shell()


@page_router.get("/groups/{group_id}")
def group_page(group_id: str) -> HTMLResponse:
    from phalanx.server.routes.pages import _shell

    return _shell()
