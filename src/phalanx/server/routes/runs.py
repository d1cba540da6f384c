"""Checkpoints, attempts, what ran (repro), the pace of each rank, and the diff of two experiments.

Plain JSON (the CLI's own documents: `phalanx checkpoints -o json`, `get -o json`'s attempts, source
and pace, `phalanx diff -o json`), so the UI and scripts read what the terminal shows.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from phalanx.checkpoints import from_artifacts, latest
from phalanx.server.deps import StoreDep, experiment_of
from phalanx.server.policy import policy, require_experiment
from phalanx.store.accounts import Role
from phalanx.views import diff_doc

router = APIRouter(tags=["runs"])


@router.get("/experiments/{experiment_id}/checkpoints")
@policy("experiment:viewer")
def checkpoints(experiment_id: str, store: StoreDep) -> dict[str, Any]:
    """The experiment's checkpoints (step, metrics, size, replica, path), the latest and the policy."""
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
@policy("experiment:viewer")
def run_details(experiment_id: str, store: StoreDep) -> dict[str, Any]:
    """Attempts (start, restarts, resumes), what ran (git, versions, packages count, snapshot) and
    the pace of each rank with the straggler, as `phalanx get -o json` shows them."""
    e = experiment_of(store, experiment_id)
    return {"experiment_id": e.id, **store.run_details(e.id)}


@router.get("/experiments/{experiment_id}/source")
@policy("experiment:viewer")
def source(experiment_id: str, store: StoreDep) -> dict[str, Any]:
    """The full reproducibility record: git commit, branch and diff, packages, versions, launch."""
    e = experiment_of(store, experiment_id)
    return {"experiment_id": e.id, **store.repro(e.id)}


@router.get("/experiments/{experiment_id}/diff/{other_id}")
@policy("experiment:viewer")
def diff(experiment_id: str, other_id: str, store: StoreDep, request: Request) -> dict[str, Any]:
    """What differs between two experiments: params, file, code, packages, git, versions (the
    caller reads both)."""
    a = experiment_of(store, experiment_id)
    b = require_experiment(request, other_id, Role.viewer)
    return diff_doc(store, a, b)
