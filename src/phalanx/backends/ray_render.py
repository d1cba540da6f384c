"""Plan -> what the Ray engine creates (pure): one placement group, one actor per replica.

The placement group has a bundle per replica, in the plan's order (master first), holding what
the file asks for: ``cpu`` -> ``CPU``, ``gpu`` -> ``GPU``, ``memory`` (MiB) -> ``memory`` (bytes),
the request, or the limit where no request is given (as on Slurm: Ray reserves, it does not cap).
A replica that asks for nothing still gets ``{CPU: 1}``: an empty bundle would place every replica
anywhere, and a replica is a machine's worth of work in the file's terms. The strategy is
``STRICT_SPREAD`` when the file asks one replica per node (a ``podAntiAffinity`` on the replicas,
Kubernetes' way of saying it), ``PACK`` otherwise.

Each actor holds its bundle whole and runs its replica as the local engine would: the same reaper
(``phalanx.backends.local.reaper``, shipped in the code bundle) leads a process group of the
replica's processes, with the framework wiring of ``phalanx.frameworks``. Hosts are known only once
Ray has placed the bundles, so the wiring names them ``@@ADDRi@@`` (bundle i's node address) and
the engine fills them in when it starts the actors; ports are fixed per experiment, as on Slurm.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from phalanx import frameworks
from phalanx.backends.base import DryRun
from phalanx.backends.kube_code import BUNDLE_PATH, env_hash, setup_steps
from phalanx.backends.slurm_script import base_port
from phalanx.domain import Framework, Range
from phalanx.errors import Problem, SpecError
from phalanx.frameworks import Endpoints
from phalanx.plan import Plan, ReplicaPlan, command_argv

NAMESPACE = "phalanx"  # the Ray namespace every Phalanx placement group and actor is named in
TOKEN_SHOWN = "<the experiment's replica token: writes this experiment only>"
# Tracking variables that name paths on the submitting machine: meaningless on a Ray node.
LOCAL_ONLY = {"PHALANX_HOME", "PHALANX_SPOOL", "PYTHONPATH", "PHALANX_TOKEN", "PHALANX_INGESTER_PID"}
STRATEGY_WHY = {
    "STRICT_SPREAD": "the replicas ask for one node each (podAntiAffinity): one bundle per node",
    "PACK": "as few nodes as the bundles fit on",
}


def _amount(rng: Range) -> float | None:
    """The request (what Ray reserves); the limit only when no request is given."""
    return rng.requests if rng.requests is not None else rng.limits


def _number(value: float) -> float | int:
    return int(value) if float(value).is_integer() else value


def bundle(replica: ReplicaPlan) -> dict[str, float | int]:
    """One replica's bundle: CPU, GPU and memory (bytes) from the file, ``{CPU: 1}`` at least."""
    res = replica.resources
    cpu, gpu, memory = _amount(res.cpu), _amount(res.gpu), _amount(res.memory)
    out: dict[str, float | int] = {"CPU": _number(cpu) if cpu else 1}
    if gpu:
        out["GPU"] = math.ceil(gpu)
    if memory:
        out["memory"] = int(memory * 1024 * 1024)
    return out


def strategy(plan: Plan) -> str:
    """STRICT_SPREAD when the file asks one replica per node, PACK otherwise."""
    spread = plan.replicas and all("podAntiAffinity" in (r.affinity or {}) for r in plan.replicas)
    return "STRICT_SPREAD" if spread and len(plan.replicas) > 1 else "PACK"


def check(plan: Plan) -> None:
    """Refuse what a Ray placement group cannot express, before anything is created."""
    problems = []
    if frameworks.uses_mpi(plan):
        problems.append(
            "framework: horovod / backend: mpi: mpirun starts its ranks on the other nodes over ssh, "
            "which Ray does not give its actors; run MPI jobs on a Slurm cluster (srun is their "
            "launcher there) or on this machine"
        )
    for r in plan.replicas:
        if r.node_selector or r.tolerations or set(r.affinity or {}) - {"podAntiAffinity"}:
            problems.append(
                f"{r.name}: node_selector, tolerations and node or pod affinity are Kubernetes "
                "placement; a Ray cluster places bundles by resources only (podAntiAffinity means one "
                "replica per node: STRICT_SPREAD). Remove them, or run the file on a Kubernetes cluster"
            )
            break
    if problems:
        raise SpecError([Problem(p) for p in problems])


@dataclass(frozen=True)
class RayActor:
    """One replica's actor: its bundle, and the processes its reaper starts (argv and the
    environment added to the node's)."""

    name: str
    replica: str
    bundle_index: int
    resources: Mapping[str, float | int]
    processes: tuple[tuple[tuple[str, ...], Mapping[str, str]], ...]

    def to_json(self, token_shown: str | None = None) -> dict[str, Any]:
        procs = []
        for argv, env in self.processes:
            shown = dict(env)
            if token_shown is not None and "PHALANX_TOKEN" in shown:
                shown["PHALANX_TOKEN"] = token_shown
            procs.append({"argv": list(argv), "env": shown})
        return {
            "name": self.name,
            "replica": self.replica,
            "scheduling_strategy": {"placement_group_bundle_index": self.bundle_index},
            "resources": dict(self.resources),
            "processes": procs,
        }


@dataclass(frozen=True)
class RayDryRun(DryRun):
    """The Ray engine's request: one placement group, an actor per bundle, and how each node gets
    the code (the server's bundle) and its environment (built once per node)."""

    address: str
    group: str  # the placement group's name (and the actors' prefix), in namespace NAMESPACE
    strategy: str
    bundles: tuple[Mapping[str, float | int], ...]
    actors: tuple[RayActor, ...]
    code_url: str
    env_build: Mapping[str, Any] | None  # {"hash", "packages", "steps"}: built once per node
    node_dir: str | None
    format: ClassVar[str] = "json"

    def _doc(self, token_shown: str | None) -> dict[str, Any]:
        return {
            "engine": "ray",
            "address": self.address,
            "namespace": NAMESPACE,
            "experiment_id": self.context.experiment_id,
            "placement_group": {
                "name": self.group,
                "strategy": self.strategy,
                "why": STRATEGY_WHY[self.strategy],
                "bundles": [dict(b) for b in self.bundles],
            },
            "code": {"url": self.code_url, "unpacked_to": "<node dir>/runs/<group>/<replica>/code"},
            "environment": dict(self.env_build) if self.env_build else None,
            "node_dir": self.node_dir or "~/.cache/phalanx/ray (on each node)",
            "actors": [a.to_json(token_shown) for a in self.actors],
        }

    @property
    def native(self) -> dict[str, Any]:
        return self._doc(None)

    def render(self) -> str:
        """The request as JSON, the replica token shown by what it is rather than its value."""
        return json.dumps(self._doc(TOKEN_SHOWN), indent=2, sort_keys=False)


def thread_env(plan: Plan, replica: ReplicaPlan) -> dict[str, str]:
    """OMP/MKL threads = the bundle's cores per process (TensorFlow's pools too: the parameter-server
    strategy hangs with one inter-op thread), as the Slurm engine sets them."""
    cpus = max(1, math.ceil(float(bundle(replica)["CPU"]) / replica.processes))
    env = {"OMP_NUM_THREADS": str(cpus), "MKL_NUM_THREADS": str(cpus)}
    if plan.framework is Framework.TENSORFLOW:
        env.update(TF_NUM_INTRAOP_THREADS=str(cpus), TF_NUM_INTEROP_THREADS=str(max(2, cpus)))
    return env


def replica_env(
    plan: Plan, experiment_id: str, tracking_env: Mapping[str, str], server_url: str, token: str | None
) -> dict[str, str]:
    """What every replica shares: the file's env, tracking (reporting to the server over HTTP)."""
    env = {k: v for k, v in tracking_env.items() if k not in LOCAL_ONLY}
    env.update(PHALANX_CAPTURED="1", PHALANX_HOST=server_url, PYTHONUNBUFFERED="1")
    if token:
        env["PHALANX_TOKEN"] = token
    return {**plan.build.env_vars, **plan.env, **env}


def render(
    plan: Plan,
    context_env: Mapping[str, str],
    *,
    experiment_id: str,
    group: str,
    server_url: str,
    workdir: str | None,
) -> tuple[tuple[Mapping[str, float | int], ...], tuple[RayActor, ...], dict[str, Any] | None]:
    """The bundles, the actors and the per-node environment build of a plan (``check`` first)."""
    check(plan)
    port = base_port(experiment_id)
    endpoints = Endpoints(
        hosts={r.name: f"@@ADDR{i}@@" for i, r in enumerate(plan.replicas)},
        ports={r.name: port + i for i, r in enumerate(plan.replicas)},
    )
    bundles = tuple(bundle(r) for r in plan.replicas)
    actors = []
    for i, r in enumerate(plan.replicas):
        procs = []
        for local_rank in range(r.processes):
            env = {
                **context_env,
                **frameworks.phalanx_env(experiment_id, r, {}, plan.params),
                **frameworks.framework_env(plan, r, endpoints, local_rank),
                **thread_env(plan, r),
            }
            procs.append((tuple(command_argv(plan.command)), env))
        actors.append(RayActor(f"{group}-{r.name}", r.name, i, bundles[i], tuple(procs)))
    digest = env_hash(plan, workdir)
    build = None
    if digest:
        build = {"hash": digest, "packages": list(plan.build.pip_packages), "steps": list(setup_steps(plan))}
    return bundles, tuple(actors), build


def code_url(server_url: str, experiment_id: str) -> str:
    return f"{server_url.rstrip('/')}/api/v1/experiments/{experiment_id}/files/{BUNDLE_PATH}"


def _shape(resources: Mapping[str, float | int]) -> str:
    shown = {k: (f"{v / 2**20:g} MiB" if k == "memory" else f"{v:g}") for k, v in resources.items()}
    return "{" + ", ".join(f"{k}: {v}" for k, v in shown.items()) + "}"


def unfit_reason(
    bundles: tuple[Mapping[str, float | int], ...],
    group_strategy: str,
    nodes: list[Mapping[str, float]],
) -> str:
    """Why a placement group waits, in the cluster's numbers: "needs 3 x {CPU: 1} spread over 3
    nodes; the cluster has 2". ``nodes``: each live node's total resources."""
    kinds: dict[str, int] = {}
    for b in bundles:
        kinds[_shape(b)] = kinds.get(_shape(b), 0) + 1
    needs = " + ".join(f"{n} x {shape}" for shape, n in kinds.items())
    if group_strategy == "STRICT_SPREAD":
        return f"needs {needs} spread over {len(bundles)} nodes; the cluster has {len(nodes)}"
    wanted: dict[str, float] = {}
    for b in bundles:
        for k, v in b.items():
            wanted[k] = wanted.get(k, 0) + float(v)
    has = {k: sum(float(n.get(k, 0)) for n in nodes) for k in wanted}
    return (
        f"needs {needs} ({_shape(wanted)} in all); the cluster has {_shape(has)} on {len(nodes)} "
        "node(s), some of it perhaps held by other work"
    )
