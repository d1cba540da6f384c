"""MXNet wiring: ps-lite's DMLC_* variables (scheduler = master, server = ps, worker)."""

from __future__ import annotations

from phalanx.domain import Framework
from phalanx.frameworks import framework_env

from .conftest import endpoints, make_plan


def test_roles_counts_and_the_scheduler_address_reach_every_replica() -> None:
    plan = make_plan(Framework.MXNET, workers=2, ps=1)
    ep = endpoints(plan)
    envs = {r.name: framework_env(plan, r, ep) for r in plan.replicas}
    assert envs["master"]["DMLC_ROLE"] == "scheduler"
    assert envs["ps-0"]["DMLC_ROLE"] == "server"
    assert envs["worker-1"]["DMLC_ROLE"] == "worker"
    for e in envs.values():
        assert e["DMLC_PS_ROOT_URI"] == "127.0.0.1"
        assert e["DMLC_PS_ROOT_PORT"] == str(ep.ports["master"])
        assert e["DMLC_NUM_SERVER"] == "1" and e["DMLC_NUM_WORKER"] == "2"
        assert e["DMLC_NODE_HOST"] == "127.0.0.1" and e["DMLC_INTERFACE"] == "lo"
