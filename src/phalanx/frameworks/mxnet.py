"""MXNet wiring: the DMLC_* variables of ps-lite's parameter-server mode.

The master is the scheduler, parameter servers are `server`, workers are `worker`. Scheduler and
servers serve inside `import mxnet` and exit once the workers finish, so no replica needs stopping.
"""

from __future__ import annotations

from phalanx.domain import Role
from phalanx.frameworks.endpoints import Endpoints
from phalanx.plan import Plan, ReplicaPlan

DMLC_ROLE = {Role.MASTER: "scheduler", Role.WORKER: "worker", Role.PS: "server"}


def env(plan: Plan, replica: ReplicaPlan, endpoints: Endpoints) -> dict[str, str]:
    counts = plan.topology()
    out = {
        "DMLC_ROLE": DMLC_ROLE[replica.role],
        "DMLC_PS_ROOT_URI": endpoints.hosts["master"],
        "DMLC_PS_ROOT_PORT": str(endpoints.ports["master"]),
        "DMLC_NUM_SERVER": str(counts["ps"]),
        "DMLC_NUM_WORKER": str(counts["worker"]),
        "DMLC_NODE_HOST": endpoints.hosts[replica.name],
    }
    if endpoints.interface:
        out["DMLC_INTERFACE"] = endpoints.interface
    return out
