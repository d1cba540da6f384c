"""MPI wiring (Horovod, or `backend: mpi`): one `mpirun` launcher over every worker slot.

Open MPI starts every rank with the launcher's environment; a small POSIX shell wrapper (so it works
in any venv) maps OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK to RANK / WORLD_SIZE / LOCAL_RANK and
names the rank's replica (rank r of k processes per replica is node r // k: master for node 0,
worker-(n-1) otherwise), so torch's env:// rendezvous and the tracking SDK both work unchanged.
"""

from __future__ import annotations

from phalanx.domain import Role
from phalanx.frameworks.endpoints import Endpoints
from phalanx.plan import Plan

COMMAND_VAR = "PHALANX_COMMAND"  # the user's command, passed through the environment (no quoting)

RANK_WRAPPER = """\
export RANK="$OMPI_COMM_WORLD_RANK" WORLD_SIZE="$OMPI_COMM_WORLD_SIZE"
export LOCAL_RANK="${OMPI_COMM_WORLD_LOCAL_RANK:-0}" LOCAL_WORLD_SIZE="${OMPI_COMM_WORLD_LOCAL_SIZE:-1}"
node=$((RANK / PHALANX_PROCESSES))
export NODE_RANK="$node" GROUP_RANK="$node" PHALANX_RANK="$node"
if [ "$node" -eq 0 ]; then
  export PHALANX_REPLICA=master PHALANX_ROLE=master PHALANX_INDEX=0
else
  export PHALANX_REPLICA="worker-$((node - 1))" PHALANX_ROLE=worker PHALANX_INDEX="$((node - 1))"
fi
exec /bin/sh -c "$PHALANX_COMMAND"
"""


def slots(plan: Plan) -> int:
    """Every process of the master and the workers; parameter servers have no place in MPI."""
    return plan.world_size


def check(plan: Plan) -> list[str]:
    """What an MPI launch cannot express (each a message for a SpecError)."""
    if any(r.role is Role.PS for r in plan.replicas):
        return ["an MPI launch has no parameter servers: remove n_ps or use framework tensorflow/mxnet"]
    return []


def launcher_argv(plan: Plan, mpirun: str = "mpirun", hostfile: str | None = None) -> list[str]:
    # --tag-output: mpirun prefixes every chunk a rank writes with its rank ([1,R]<stdout>:), so the
    # engine can give each replica its ranks' lines (backends/local/mpi_output.py puts lines that
    # arrived in pieces back together)
    argv = [mpirun, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "--tag-output"]
    argv += ["-np", str(slots(plan))]
    if hostfile:
        argv += ["--hostfile", hostfile]
    return [*argv, "/bin/sh", "-c", RANK_WRAPPER]


def launcher_env(plan: Plan, endpoints: Endpoints, command: str) -> dict[str, str]:
    """The launcher's environment, inherited by every rank (the wrapper adds the per-rank names)."""
    processes = plan.replicas[0].processes if plan.replicas else 1
    return {
        "MASTER_ADDR": endpoints.hosts["master"],
        "MASTER_PORT": str(endpoints.ports["master"]),
        "PHALANX_PROCESSES": str(processes),
        COMMAND_VAR: command,
    }
