"""TensorFlow wiring: TF_CONFIG holds the whole cluster (chief, worker, ps) and this replica's task."""

from __future__ import annotations

import json

from phalanx.domain import Framework
from phalanx.frameworks import framework_env

from .conftest import endpoints, make_plan


def test_tf_config_names_the_master_chief_and_lists_every_replica_once() -> None:
    plan = make_plan(Framework.TENSORFLOW, workers=2, ps=1)
    ep = endpoints(plan)
    configs = {r.name: json.loads(framework_env(plan, r, ep)["TF_CONFIG"]) for r in plan.replicas}
    cluster = configs["master"]["cluster"]
    assert cluster == {
        "chief": [ep.address("master")],
        "worker": [ep.address("worker-0"), ep.address("worker-1")],
        "ps": [ep.address("ps-0")],
    }
    assert all(c["cluster"] == cluster for c in configs.values())
    assert configs["master"]["task"] == {"type": "chief", "index": 0}
    assert configs["worker-1"]["task"] == {"type": "worker", "index": 1}
    assert configs["ps-0"]["task"] == {"type": "ps", "index": 0}
    assert len({a for addrs in cluster.values() for a in addrs}) == 4  # a port each


def test_without_ps_the_cluster_has_no_ps_entry() -> None:
    plan = make_plan(Framework.TENSORFLOW, workers=1)
    config = json.loads(framework_env(plan, plan.replica("worker-0"), endpoints(plan))["TF_CONFIG"])
    assert set(config["cluster"]) == {"chief", "worker"}
