"""Hyperparameters: every (section, key) a replica connected, with the replica it came from."""

from __future__ import annotations

from fastapi import APIRouter

from phalanx.server.deps import StoreDep, experiment_of
from phalanx.server.policy import policy
from phalanx.server.schemas import ParamOut
from phalanx.views import conflict_notes

router = APIRouter(tags=["params"])


@router.get("/experiments/{experiment_id}/params", response_model=list[ParamOut])
@policy("experiment:viewer")
def params(experiment_id: str, store: StoreDep) -> list[ParamOut]:
    """Every (section, key), with ``conflict`` on both sides of a declared value the script
    reported differently (docs/tracking.md#declared-params)."""
    e = experiment_of(store, experiment_id)
    records = store.params(e.id)
    notes = conflict_notes(records)
    return [ParamOut.of(p, notes.get((p.section, p.key))) for p in records]
