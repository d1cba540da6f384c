"""This machine's queue (`phalanx queue`) over HTTP: what runs, what waits in order and why.

Stopping a queued experiment is the experiments route's stop (its waiting `phalanx run` sees the
request and leaves the queue). The queue is the ledger of the machine the server runs on; the
server's own queue comes with remote submission.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from phalanx.server.deps import SettingsDep, StoreDep

router = APIRouter(tags=["queue"])


@router.get("/queue")
def queue(settings: SettingsDep, store: StoreDep) -> dict[str, Any]:
    """`phalanx queue -o json`: each waiting run with ``why`` (its project's quota, the resources
    it waits for, the runs ahead of it by priority or fair share); ``projects``: each project's
    quota, what it holds and its recent usage."""
    from phalanx.queue import overview

    return overview(settings.store, store)  # each queued row has its ``why`` from the admission pass


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
