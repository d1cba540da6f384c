"""Hyperparameters: every (section, key) a replica connected, with the replica it came from."""

from __future__ import annotations

from fastapi import APIRouter

from phalanx.server.deps import StoreDep, experiment_of
from phalanx.server.policy import policy
from phalanx.server.schemas import ParamOut

router = APIRouter(tags=["params"])


@router.get("/experiments/{experiment_id}/params", response_model=list[ParamOut])
@policy("experiment:viewer")
def params(experiment_id: str, store: StoreDep) -> list[ParamOut]:
    e = experiment_of(store, experiment_id)
    return [ParamOut.of(p) for p in store.params(e.id)]
