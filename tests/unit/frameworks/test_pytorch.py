"""PyTorch wiring: the names torchrun sets, with node and local ranks as torchrun numbers them."""

from __future__ import annotations

import pytest

from phalanx.domain import Framework
from phalanx.frameworks import framework_env, pytorch

from .conftest import endpoints, make_plan


def test_master_and_workers_get_torchrun_names_with_ranks_in_replica_order() -> None:
    plan = make_plan(Framework.PYTORCH, workers=2)
    ep = endpoints(plan)
    envs = {r.name: pytorch.env(plan, r, ep) for r in plan.replicas}
    assert {e["RANK"] for e in envs.values()} == {"0", "1", "2"}
    assert envs["worker-1"]["RANK"] == "2"
    for e in envs.values():
        assert e["MASTER_ADDR"] == "127.0.0.1"
        assert e["MASTER_PORT"] == str(ep.ports["master"])
        assert e["WORLD_SIZE"] == "3"
        assert e["LOCAL_RANK"] == "0" and e["LOCAL_WORLD_SIZE"] == "1"


def test_processes_per_replica_number_ranks_node_by_node() -> None:
    plan = make_plan(Framework.PYTORCH, workers=1, processes=2)
    ep = endpoints(plan)
    worker = plan.replica("worker-0")
    ranks = [pytorch.env(plan, worker, ep, local_rank=j) for j in range(2)]
    assert [e["RANK"] for e in ranks] == ["2", "3"]
    assert [e["LOCAL_RANK"] for e in ranks] == ["0", "1"]
    assert {e["NODE_RANK"] for e in ranks} == {"1"} and {e["GROUP_RANK"] for e in ranks} == {"1"}
    assert {e["WORLD_SIZE"] for e in ranks} == {"4"} and {e["LOCAL_WORLD_SIZE"] for e in ranks} == {"2"}


def test_a_local_rank_outside_the_replica_is_a_bug_caught_early() -> None:
    plan = make_plan(Framework.PYTORCH)
    with pytest.raises(ValueError):
        pytorch.env(plan, plan.replica("master"), endpoints(plan), local_rank=1)


def test_horovod_gets_the_pytorch_names_and_no_framework_gets_none() -> None:
    plan = make_plan(Framework.HOROVOD)
    assert "RANK" in framework_env(plan, plan.replica("master"), endpoints(plan))
    single = make_plan(None, workers=0)
    assert framework_env(single, single.replica("master"), endpoints(single)) == {}
