"""TensorFlow wiring: TF_CONFIG with the cluster and this replica's task.

The master is TensorFlow's chief, workers are `worker`, parameter servers are `ps`. Each replica
listens on its own port. The worker and ps servers of ParameterServerStrategy never exit by
themselves: the supervisor stops them once the chief has succeeded (see `chief_ends_experiment`).
"""

from __future__ import annotations

import json
from typing import Any

from phalanx.domain import Role
from phalanx.frameworks.endpoints import Endpoints
from phalanx.plan import Plan, ReplicaPlan

TASK_TYPE = {Role.MASTER: "chief", Role.WORKER: "worker", Role.PS: "ps"}


def cluster(plan: Plan, endpoints: Endpoints) -> dict[str, list[str]]:
    spec: dict[str, list[str]] = {}
    for role in (Role.MASTER, Role.WORKER, Role.PS):
        members = sorted((r for r in plan.replicas if r.role is role), key=lambda r: r.index)
        if members:
            spec[TASK_TYPE[role]] = [endpoints.address(r.name) for r in members]
    return spec


def tf_config(plan: Plan, replica: ReplicaPlan, endpoints: Endpoints) -> dict[str, Any]:
    return {
        "cluster": cluster(plan, endpoints),
        "task": {"type": TASK_TYPE[replica.role], "index": replica.index},
        "environment": "cloud",
    }


def env(plan: Plan, replica: ReplicaPlan, endpoints: Endpoints) -> dict[str, str]:
    return {"TF_CONFIG": json.dumps(tf_config(plan, replica, endpoints), separators=(",", ":"))}
