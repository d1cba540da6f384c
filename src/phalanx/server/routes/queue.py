"""This machine's queue (`phalanx queue`) over HTTP: what runs, what waits in order and why.

Stopping a queued experiment is the experiments route's stop (its waiting `phalanx run` sees the
request and leaves the queue). The queue is the ledger of the machine the server runs on; the
server's own queue comes with remote submission.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from phalanx.server.deps import SettingsDep, StoreDep
from phalanx.server.policy import policy, principal_of

router = APIRouter(tags=["queue"])


@router.get("/queue")
@policy("signed-in")
def queue(settings: SettingsDep, store: StoreDep, request: Request) -> dict[str, Any]:
    """`phalanx queue -o json`: each waiting run with ``why`` (its project's quota, the resources
    it waits for, the runs ahead of it by priority or fair share); ``projects``: each project's
    quota, what it holds and its recent usage. Runs of projects the caller is not in are there
    (they hold and wait for the same machine) but without id or name."""
    import contextlib

    from phalanx.queue import overview
    from phalanx.reconcile import reconcile

    with contextlib.suppress(Exception):  # reading the queue must work even if the store fails
        reconcile(store, settings.store)  # a killed waiter's row shows stopped, not queued
    doc = overview(settings.store, store)  # each queued row has its ``why`` from the admission pass
    visible = principal_of(request).visible_projects()
    if visible is not None:
        for row in doc["running"] + doc["queued"]:
            if not _in_projects(store, row["experiment_id"], visible):
                row.update(experiment_id=None, name="(a run of another project)", pid=None)
        doc["projects"] = [p for p in doc.get("projects", []) if p.get("project") in visible]
    return doc


def _in_projects(store: StoreDep, experiment_id: str, projects: tuple[str, ...]) -> bool:
    from phalanx.errors import PhalanxError

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
