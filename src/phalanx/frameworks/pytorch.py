"""PyTorch wiring: the variables torchrun sets, so `init_process_group("gloo")` with env:// works.

The master replica is node 0 and worker i is node i + 1 (Polyaxon's ranks). With k processes per
replica (torchrun's --nproc_per_node), process j of node n has RANK n*k + j and LOCAL_RANK j.
"""

from __future__ import annotations

from phalanx.domain import Role
from phalanx.frameworks.endpoints import Endpoints
from phalanx.plan import Plan, ReplicaPlan


def node_rank(replica: ReplicaPlan) -> int:
    """The replica's node rank; parameter servers take no part in the collective."""
    if replica.role is Role.PS or replica.rank is None:
        raise ValueError(f"{replica.name} has no rank in a PyTorch collective")
    return replica.rank


def env(plan: Plan, replica: ReplicaPlan, endpoints: Endpoints, local_rank: int = 0) -> dict[str, str]:
    k = replica.processes
    if not 0 <= local_rank < k:
        raise ValueError(f"local rank {local_rank} outside 0..{k - 1}")
    node = node_rank(replica)
    return {
        "MASTER_ADDR": endpoints.hosts["master"],
        "MASTER_PORT": str(endpoints.ports["master"]),
        "WORLD_SIZE": str(plan.world_size),
        "RANK": str(node * k + local_rank),
        "LOCAL_RANK": str(local_rank),
        "LOCAL_WORLD_SIZE": str(k),
        "GROUP_RANK": str(node),
        "NODE_RANK": str(node),
        "ROLE_RANK": str(node * k + local_rank),
        "ROLE_WORLD_SIZE": str(plan.world_size),
    }
