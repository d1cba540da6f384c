"""Distribution configs: the Azure ML v1 `distributed_job_config` shape, as an alternative to the
estimator's own node_count / process_count_per_node / distributed_backend arguments.

Users coming from Azure know both forms (`PyTorch(..., node_count=2, distributed_backend="gloo")` and
`ScriptRunConfig(..., distributed_job_config=PyTorchConfiguration(...))`); each config here resolves to
the same three numbers and backend name that the estimator arguments give, so both land on one spec.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PyTorchDistribution:
    """torch.distributed over env:// (what torchrun sets): node_count replicas, each starting
    process_count_per_node processes. ``backend`` is the communication backend the script passes to
    ``init_process_group`` ("gloo" on CPU, "nccl" on GPU); Phalanx checks it, the script chooses it."""

    node_count: int = 1
    process_count_per_node: int = 1
    backend: str = "gloo"


@dataclass(frozen=True)
class MpiDistribution:
    """One `mpirun` over node_count x process_count_per_node slots (Open MPI; Horovod scripts)."""

    node_count: int = 1
    process_count_per_node: int = 1


@dataclass(frozen=True)
class TensorFlowDistribution:
    """TensorFlow parameter-server training: the master (TF_CONFIG's chief) plus worker_count workers
    plus parameter_server_count parameter servers."""

    worker_count: int = 1
    parameter_server_count: int = 1


Distribution = PyTorchDistribution | MpiDistribution | TensorFlowDistribution
