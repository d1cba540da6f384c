"""Checkpoints, attempts, what ran (repro), the pace of each rank, and the diff of two experiments.

Plain JSON (the CLI's own documents: `phalanx checkpoints -o json`, `get -o json`'s attempts, source
and pace, `phalanx diff -o json`), so the UI and scripts read what the terminal shows.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from phalanx.server.deps import StoreDep, experiment_of

router = APIRouter(tags=["runs"])


@router.get("/experiments/{experiment_id}/checkpoints")
def checkpoints(experiment_id: str, store: StoreDep) -> dict[str, Any]:
    """The experiment's checkpoints (step, metrics, size, replica, path), the latest and the policy."""
    from phalanx.checkpoints import from_artifacts, latest

    e = experiment_of(store, experiment_id)
    found = from_artifacts(store.artifacts(e.id))
    last = latest(found)
    return {
        "experiment_id": e.id,
        "policy": (e.plan or {}).get("checkpoints") or {},
        "checkpoints": [c.to_json() for c in found],
        "latest": last.to_json() if last else None,
    }


@router.get("/experiments/{experiment_id}/run")
def run_details(experiment_id: str, store: StoreDep) -> dict[str, Any]:
    """Attempts (start, restarts, resumes), what ran (git, versions, packages count, snapshot) and
    the pace of each rank with the straggler, as `phalanx get -o json` shows them."""
    from phalanx.views import run_details as details

    e = experiment_of(store, experiment_id)
    return {"experiment_id": e.id, **details(store, e.id)}


@router.get("/experiments/{experiment_id}/source")
def source(experiment_id: str, store: StoreDep) -> dict[str, Any]:
    """The full reproducibility record: git commit, branch and diff, packages, versions, launch."""
    e = experiment_of(store, experiment_id)
    return {"experiment_id": e.id, **store.repro(e.id)}


@router.get("/experiments/{experiment_id}/diff/{other_id}")
def diff(experiment_id: str, other_id: str, store: StoreDep) -> dict[str, Any]:
    """What differs between two experiments: params, file, code, packages, git, versions."""
    from phalanx.views import diff_doc

    a, b = experiment_of(store, experiment_id), experiment_of(store, other_id)
    return diff_doc(store, a, b)
