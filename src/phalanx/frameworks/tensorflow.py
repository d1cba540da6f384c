"""TensorFlow wiring: TF_CONFIG with the cluster and this replica's task.

The master is TensorFlow's chief, workers are `worker`, parameter servers are `ps`. Each replica
listens on its own port. The worker and ps servers of ParameterServerStrategy never exit by
themselves: the supervisor stops them once the chief has succeeded (see `chief_ends_experiment`).

Thread pools (``thread_env``): TensorFlow sizes its inter-op pool by the cores it may run on
(``sched_getaffinity``), so a replica given one core (the local engine pins ``cpu: {limits: 1}``
to one, Slurm binds a one-CPU task) gets a pool of one thread, and a ParameterServerStrategy worker
deadlocks on it. Profiled (issue 39: py-spy of every replica, gdb of a worker): every process idle
for good, the chief in ``ClusterCoordinator.join`` with its closures waiting on the workers, and on
a worker the pool's one ``tf_Compute`` thread inside the eager service's ``Enqueue`` handler
(``EagerServiceImpl::ExecuteOp`` -> ``KernelAndDeviceFunc::Run``) waiting for the step function it
runs, whose kernels are queued on that same pool. ``OMP_NUM_THREADS=2`` still hangs;
``TF_NUM_INTEROP_THREADS=2`` alone runs. So every engine gives a TensorFlow replica at least two
inter-op threads (one blocked caller, one to run what it waits for).
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


MIN_INTEROP = 2  # a blocking kernel and the op that unblocks it need a thread each


def thread_env(cores: int) -> dict[str, str]:
    """TensorFlow's pools for a replica (one process) with ``cores`` cores: intra-op = the cores,
    inter-op at least MIN_INTEROP (see the module's docstring for the deadlock one thread causes)."""
    return {"TF_NUM_INTRAOP_THREADS": str(cores), "TF_NUM_INTEROP_THREADS": str(max(MIN_INTEROP, cores))}


def env(plan: Plan, replica: ReplicaPlan, endpoints: Endpoints) -> dict[str, str]:
    return {"TF_CONFIG": json.dumps(tf_config(plan, replica, endpoints), separators=(",", ":"))}
