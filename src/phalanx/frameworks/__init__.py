"""Framework wiring: a replica's cluster environment (and launcher argv) as pure functions.

Every backend consumes the same Plan; these functions turn a replica of it, plus the addresses the
backend chose (`Endpoints`), into the variables each framework's own launcher would set (torchrun,
TF_CONFIG, DMLC_*, mpirun). Nothing here does I/O, so `--dry-run` shows exactly what runs, and the
Slurm and Kubernetes engines reuse the same functions with their own hosts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from phalanx.domain import BackendKind, Framework
from phalanx.frameworks import mxnet, pytorch, tensorflow
from phalanx.frameworks.endpoints import Endpoints as Endpoints
from phalanx.plan import Plan, ReplicaPlan
from phalanx.tracking.identity import ENV_PARAMS


def uses_mpi(plan: Plan) -> bool:
    """Horovod, or `backend: mpi`: one mpirun launcher over every worker slot."""
    return plan.framework is Framework.HOROVOD or plan.backend is BackendKind.MPI


def phalanx_env(
    experiment_id: str,
    replica: ReplicaPlan,
    tracking_env: Mapping[str, str],
    params: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """The PHALANX_* variables every replica gets (contract 1), whatever its framework.

    ``tracking_env`` carries what the SDK needs to reach the store (PHALANX_HOME, PHALANX_SPOOL,
    PHALANX_CAPTURED, PHALANX_HOST/TOKEN), the same for every replica. ``params`` (declarations,
    `--param` values, a group trial's sampled values) go as JSON in PHALANX_PARAMS, so a script reads
    them with ``task.connect()`` / ``task.get_parameters()`` even when the command never names them.
    """
    env = {
        "PHALANX_EXPERIMENT_ID": experiment_id,
        "PHALANX_REPLICA": replica.name,
        "PHALANX_ROLE": str(replica.role),
        "PHALANX_INDEX": str(replica.index),
        "PHALANX_RANK": "" if replica.rank is None else str(replica.rank),
    }
    if params:
        env[ENV_PARAMS] = json.dumps(dict(params), sort_keys=True, default=str)
    env.update(tracking_env)
    return env


def framework_env(
    plan: Plan, replica: ReplicaPlan, endpoints: Endpoints, local_rank: int = 0
) -> dict[str, str]:
    """The cluster wiring of one process of one replica, by the plan's framework.

    Without a framework the experiment is a single process and gets no cluster wiring. MPI launches
    are not wired per replica (see ``phalanx.frameworks.mpi``).
    """
    if plan.framework is Framework.TENSORFLOW:
        return tensorflow.env(plan, replica, endpoints)
    if plan.framework is Framework.MXNET:
        return mxnet.env(plan, replica, endpoints)
    if plan.framework in (Framework.PYTORCH, Framework.HOROVOD):
        return pytorch.env(plan, replica, endpoints, local_rank)
    return {}
