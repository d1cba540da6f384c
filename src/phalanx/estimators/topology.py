"""The estimator's topology arguments (or a distribution config) -> backend, workers, ps, processes.

Kept apart from the estimator so each rule is one readable block: which backends a class takes, what
needs a distributed backend, what only parameter-server training uses, and that nccl needs GPUs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from phalanx.domain import Framework
from phalanx.errors import Problem
from phalanx.estimators.distribution import MpiDistribution, PyTorchDistribution, TensorFlowDistribution
from phalanx.suggest import closest


def did_you_mean(word: str, choices: Sequence[str]) -> str:
    close = closest(word, choices)
    return f" (did you mean {close!r}?)" if close else ""


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class TopologyArgs:
    """The raw arguments, as given (None = not given)."""

    def __init__(self, **values: Any) -> None:
        self.node_count: Any = values["node_count"]
        self.process_count_per_node: Any = values["process_count_per_node"]
        self.distributed_backend: Any = values["distributed_backend"]
        self.worker_count: Any = values["worker_count"]
        self.parameter_server_count: Any = values["parameter_server_count"]
        self.distribution: Any = values["distribution"]


def _count(value: Any, name: str, minimum: int, problems: list[Problem], hint: str) -> int:
    if value is None:
        return 1 if minimum >= 1 else 0
    if not _is_int(value) or value < minimum:
        problems.append(Problem(f"{value!r} is not allowed; give a whole number >= {minimum}{hint}", name))
        return max(minimum, 1) if minimum else 0
    return int(value)


_FAILED: tuple[str | None, int, int, int] = (None, 0, 0, 1)


def resolve_topology(
    cls: str,
    framework: Framework | None,
    backends: tuple[str, ...],
    use_gpu: bool,
    t: TopologyArgs,
    problems: list[Problem],
) -> tuple[str | None, int, int, int]:
    """-> (distributed backend, n_workers, n_ps, processes per replica); problems appended."""
    if t.distribution is not None:
        allowed = _apply_distribution(cls, framework, backends, t, problems)
        if allowed is None:
            return _FAILED
        backends = allowed
    backend = t.distributed_backend
    if backend is not None:
        if not isinstance(backend, str) or backend.lower() not in backends:
            shown = backend if isinstance(backend, str) else repr(backend)
            problems.append(
                Problem(
                    f"{shown!r} is not a {cls} backend{did_you_mean(str(shown).lower(), backends)}; "
                    f"use one of {', '.join(repr(b) for b in backends)} or None for one process",
                    "distributed_backend",
                )
            )
            return _FAILED
        backend = backend.lower()

    nodes = _count(t.node_count, "node_count", 1, problems, " (1 = this machine only)")
    procs = _count(t.process_count_per_node, "process_count_per_node", 1, problems, "")
    if backend == "ps":
        return _ps_topology(t, problems)
    _check_process_topology(framework, backends, backend, use_gpu, t, nodes, procs, problems)
    return backend, nodes - 1, 0, procs


def _apply_distribution(
    cls: str, framework: Framework | None, backends: tuple[str, ...], t: TopologyArgs, problems: list[Problem]
) -> tuple[str, ...] | None:
    """Azure's ``distribution=`` object, spelled out into ``t``'s counts and backend; the backends
    it allows, or None when it cannot be used (a problem says why)."""
    explicit = [
        n
        for n in ("node_count", "process_count_per_node", "distributed_backend")
        if getattr(t, n) is not None
    ]
    if explicit:
        problems.append(
            Problem(f"give either distribution= or {', '.join(explicit)}, not both", "distribution")
        )
        return None
    d = t.distribution
    if isinstance(d, PyTorchDistribution):
        if framework not in (None, Framework.PYTORCH):
            problems.append(Problem(f"PyTorchDistribution does not fit {cls}", "distribution"))
        t.node_count, t.process_count_per_node = d.node_count, d.process_count_per_node
        t.distributed_backend = d.backend
        return ("gloo", "nccl", "mpi")
    if isinstance(d, MpiDistribution):
        t.node_count, t.process_count_per_node, t.distributed_backend = (
            d.node_count,
            d.process_count_per_node,
            "mpi",
        )
        return backends
    if isinstance(d, TensorFlowDistribution):
        if framework is not Framework.TENSORFLOW:
            problems.append(
                Problem(f"TensorFlowDistribution needs the TensorFlow estimator, not {cls}", "distribution")
            )
            return None
        t.distributed_backend = "ps"
        t.worker_count, t.parameter_server_count = d.worker_count, d.parameter_server_count
        return backends
    problems.append(
        Problem(
            "give PyTorchDistribution(...), MpiDistribution(...) or TensorFlowDistribution(...)",
            "distribution",
        )
    )
    return None


def _ps_topology(t: TopologyArgs, problems: list[Problem]) -> tuple[str | None, int, int, int]:
    """TensorFlow parameter-server training: workers and parameter servers, one process each."""
    for name in ("node_count", "process_count_per_node"):
        if getattr(t, name) not in (None, 1):
            problems.append(
                Problem(
                    "with distributed_backend='ps' the topology is worker_count and "
                    "parameter_server_count; leave this at 1",
                    name,
                )
            )
    workers = _count(t.worker_count, "worker_count", 1, problems, " (the master counts as one)")
    n_ps = _count(t.parameter_server_count, "parameter_server_count", 0, problems, " (0 = no ps)")
    if t.parameter_server_count is None:
        n_ps = 1
    return "ps", workers - 1, n_ps, 1


def _check_process_topology(
    framework: Framework | None,
    backends: tuple[str, ...],
    backend: str | None,
    use_gpu: bool,
    t: TopologyArgs,
    nodes: int,
    procs: int,
    problems: list[Problem],
) -> None:
    """Nodes x processes: a backend when more than one, and no parameter-server counts."""
    for name in ("worker_count", "parameter_server_count"):
        if getattr(t, name) is not None:
            fix = (
                "set distributed_backend='ps' to use it"
                if framework is Framework.TENSORFLOW
                else "use node_count and process_count_per_node"
            )
            problems.append(Problem(f"only for TensorFlow parameter-server training; {fix}", name))
    if backend is None and (nodes > 1 or procs > 1):
        name = "process_count_per_node" if procs > 1 else "node_count"
        choices = {
            "ps": "distributed_backend='ps' (with worker_count) or 'mpi'",
            "nccl": "distributed_backend='gloo' (CPU), 'nccl' (GPU) or 'mpi'",
        }
        fix = next((v for k, v in choices.items() if k in backends), "distributed_backend='mpi'")
        problems.append(
            Problem(
                f"{nodes} node(s) x {procs} process(es) need a distributed backend; set {fix}, "
                "or leave node_count and process_count_per_node at 1",
                name,
            )
        )
    if backend == "nccl" and not use_gpu:
        problems.append(
            Problem(
                "'nccl' runs on GPUs only; set use_gpu=True, or use 'gloo' on CPUs", "distributed_backend"
            )
        )
