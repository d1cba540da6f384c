"""The Backend protocol every engine follows (local processes, Slurm, Kubernetes, Kubeflow).

``dry_run`` is pure: its ``native`` is exactly what ``submit`` would send, in the engine's own terms
(argv and env per process, an sbatch script, Kubernetes objects), and ``render()`` prints it the way
that engine's users read it. ``describe`` returns None once the engine has forgotten the job;
``cancel`` is idempotent. Engine SDKs are imported inside the engine modules only.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from phalanx.domain import ExperimentStatus, ReplicaState
from phalanx.plan import Plan


@dataclass(frozen=True)
class LaunchContext:
    """What a backend needs beyond the Plan: identity, paths and tracking wiring for the replicas."""

    experiment_id: str
    workdir: str  # where replicas start (the file's directory, or --workdir)
    python: str  # the interpreter `python` in run.cmd means (build venv, else Phalanx's own)
    tracking_env: Mapping[str, str] = field(default_factory=dict)  # PHALANX_HOST/TOKEN/HOME/SPOOL...
    log_dir: str | None = None  # where per-replica log files go, when the backend writes them
    oversubscribe: bool = False
    # the exact cores and GPUs this machine's ledger granted the experiment (local engine); None:
    # not admitted through the ledger (dry run, --oversubscribe), so the whole machine is the pool
    cpu_pool: tuple[int, ...] | None = None
    gpu_pool: tuple[str, ...] | None = None


@dataclass(frozen=True)
class DryRun:
    backend: str  # "local", "slurm", "kubernetes", "kubeflow"
    plan: Plan
    context: LaunchContext
    native: Any  # exactly what submit() sends
    format: str = "text"  # "text", "sbatch", "yaml"

    def render(self) -> str:
        if isinstance(self.native, str):
            return self.native
        import json

        return json.dumps(self.native, indent=2, default=str)


@dataclass(frozen=True)
class ReplicaStatus:
    name: str
    state: ReplicaState
    host: str | None = None
    exit_code: int | None = None  # negative: killed by that signal (as subprocess reports it)
    reason: str | None = None
    pid: int | None = None  # the replica leader's process id, where the engine has one
    finished_at: float | None = None  # when the engine saw it end (orders simultaneous failures)


@dataclass(frozen=True)
class JobStatus:
    status: ExperimentStatus
    replicas: tuple[ReplicaStatus, ...] = ()
    reason: str | None = None


class Backend(Protocol):
    name: str

    def dry_run(self, plan: Plan, context: LaunchContext) -> DryRun:
        """What would be created; raises SpecError for what this engine cannot express."""
        ...

    def submit(self, dry_run: DryRun) -> str:
        """Start it; returns the engine's handle (job id, label selector...)."""
        ...

    def describe(self, handle: str) -> JobStatus | None: ...

    def logs(self, handle: str, replica: str, follow: bool = False) -> Iterator[str]: ...

    def cancel(self, handle: str) -> None: ...
