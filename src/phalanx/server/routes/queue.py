"""The queue over HTTP: what runs and what waits on this machine (its ledger, as `phalanx queue`),
in order and why, with each project's quota and fair share; what waits on the server's cluster
targets; and a waiting run's priority changed by whoever may edit its project.

Stopping a queued experiment is the experiments route's stop (its waiting `phalanx run` sees the
request and leaves the queue).
"""

from __future__ import annotations

import contextlib
from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from phalanx.errors import Conflict, PhalanxError
from phalanx.priority import MAX_PRIORITY
from phalanx.queue import ledger_for, overview, with_targets
from phalanx.reconcile import reconcile
from phalanx.server.audit import describe
from phalanx.server.deps import SettingsDep, StoreDep, experiment_of
from phalanx.server.policy import Principal, policy, principal_of
from phalanx.store.accounts import Role
from phalanx.store.base import Store

router = APIRouter(tags=["queue"])
MASKED = "(a run of another project)"


@router.get("/queue")
@policy("signed-in")
def queue(settings: SettingsDep, store: StoreDep, request: Request) -> dict[str, Any]:
    """`phalanx queue -o json` with ``target`` on every row: each waiting run with ``why`` (its
    project's quota, the resources it waits for, the runs ahead of it by priority or fair share);
    ``projects``: each project's quota, what it holds and its recent usage; ``elsewhere``: runs
    waiting on the server's cluster targets (their scheduler orders them). ``may_change`` on a row:
    whether the caller may stop it or change its priority. Runs of projects the caller is not in are
    there (they hold and wait for the same machine) but without id, name or project: ``masked``."""
    with contextlib.suppress(Exception):  # reading the queue must work even if the store fails
        reconcile(store, settings.store)  # a killed waiter's row shows stopped, not queued
    # each queued row has its ``why`` from the admission pass
    doc = with_targets(overview(settings.store, store), store)
    who = principal_of(request)
    visible = who.visible_projects()
    for row in doc["running"] + doc["queued"] + doc["elsewhere"]:
        if visible is not None and not _in_projects(store, row["experiment_id"], visible):
            row.update(experiment_id=None, name=MASKED, project=None, pid=None, masked=True, may_change=False)
        else:
            row.update(masked=False, may_change=_may_change(who, row["project"]))
    if visible is not None:
        doc["projects"] = [p for p in doc.get("projects", []) if p.get("project") in visible]
    return doc


class PriorityIn(BaseModel):
    priority: int = Field(ge=-MAX_PRIORITY, le=MAX_PRIORITY, description="higher starts first")


@router.patch("/queue/{experiment_id}")
@policy("experiment:editor")
def reprioritise(
    experiment_id: str, body: PriorityIn, store: StoreDep, settings: SettingsDep, request: Request
) -> dict[str, Any]:
    """Change the priority of a run waiting in this machine's queue (409 when it is not waiting
    here: running already, ended, or on a cluster whose scheduler orders it)."""
    e = experiment_of(store, experiment_id)
    entry = ledger_for(settings.store).reprioritise(e.id, body.priority)
    if entry is None:
        raise Conflict(f"experiment {e.id} is not waiting in this machine's queue ({e.status})")
    describe(request, "queue.priority", e.id, e.project, str(body.priority))
    return {"experiment_id": e.id, "priority": entry.priority}


def _may_change(who: Principal, project: str | None) -> bool:
    held = who.role_in(project) if project is not None else None
    return held is not None and held >= Role.editor


def _in_projects(store: Store, experiment_id: str, projects: tuple[str, ...]) -> bool:
    try:
        return store.get_experiment(experiment_id).project in projects
    except PhalanxError:
        return False


def why_waiting(row: dict[str, Any], free: dict[str, Any]) -> str:
    """In words, from a row alone (without quotas or fair share, which the queue's own ``why``
    adds): the resources it needs that are not free, and the runs ahead of it."""
    needs = row["needs"]
    short = []
    for what, unit in (("cpus", "core"), ("gpus", "GPU")):
        n = needs.get(what, 0)
        if n > free[what]:
            short.append(f"{n} {unit}{'s' * (n != 1)} ({free[what]} free)")
    if needs.get("memory_mib", 0) > free["memory_mib"]:
        short.append(f"{needs['memory_mib']:g} MiB ({free['memory_mib']:g} MiB free)")
    ahead = (row.get("position") or 1) - 1
    parts = [f"waits for {', '.join(short)}"] if short else []
    if ahead:
        parts.append(f"{ahead} run{'s' * (ahead != 1)} ahead of it in the queue")
    return "; ".join(parts) or "starts at its next look (everything it needs is free)"
