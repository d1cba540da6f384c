"""The Backend protocol every engine follows (local processes, Slurm, Kubernetes, Kubeflow).

``dry_run`` is pure and typed: each engine returns its own ``DryRun`` subclass (process units, an
sbatch script, Kubernetes objects) whose ``native`` is exactly what ``submit`` would send, in the
engine's own terms, and whose ``render()`` prints it the way that engine's users read it.
``describe`` returns None once the engine has forgotten the job; ``cancel`` is idempotent. Each
method's contract is on ``Backend``. Engine SDKs are imported inside the engine modules only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, TypeVar

from phalanx.domain import ExperimentStatus, ReplicaState
from phalanx.errors import UsageError
from phalanx.machine.box import Isolation
from phalanx.plan import Plan

# In the PATH an experiment file gives: the machine's own PATH (a Slurm node's there), ``$PATH`` or
# ``${PATH}`` as a whole name (``$PATH_EXTRA`` is another variable)
MACHINE_PATH = re.compile(r"\$\{PATH\}|\$PATH(?![A-Za-z0-9_])")


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
    # inputs each cluster node (Slurm) or pod (Kubernetes) fetches into its own cache before its
    # replicas start (phalanx.data.inputs.fetch_order); empty on the local engine, which fetched them
    input_fetches: tuple[Mapping[str, Any], ...] = ()
    # a server-run experiment's box (phalanx.machine.box): the local engine starts each replica in
    # it; None: replicas run as the user who launched, as always
    isolation: Isolation | None = None


@dataclass(frozen=True)
class DryRun:
    """What an engine would create for a plan, as a typed value: each engine subclasses it with its
    own request (``LocalDryRun``: process units; ``SlurmDryRun``: an sbatch script; ``KubeDryRun``:
    Kubernetes objects), as TorchX types its ``AppDryRunInfo``. ``native`` is the request in the
    engine's own JSON-able terms (exactly what ``submit`` sends) and ``render()`` prints it the way
    that engine's users read it (``format`` names how)."""

    backend: str  # "local", "slurm", "kubernetes", "kubeflow", "trainer"
    plan: Plan
    context: LaunchContext
    format: ClassVar[str] = "text"  # "json", "sbatch", "yaml"

    @property
    def native(self) -> Any:
        """The request in the engine's own terms: JSON-able values, a script text..."""
        raise NotImplementedError

    def render(self) -> str:
        """The request as the engine's users read it (``format``)."""
        native = self.native
        return native if isinstance(native, str) else json.dumps(native, indent=2, default=str)


D = TypeVar("D", bound=DryRun)


def expect_dry_run(dry_run: DryRun, kind: type[D], backend: str) -> D:
    """``dry_run`` as the engine's own type; UsageError when it came from another engine."""
    if not isinstance(dry_run, kind):
        raise UsageError(f"the {backend} engine cannot submit a dry run made by {dry_run.backend!r}")
    return dry_run


@dataclass(frozen=True)
class ReplicaStatus:
    name: str
    state: ReplicaState
    host: str | None = None
    exit_code: int | None = None  # negative: killed by that signal (as subprocess reports it)
    reason: str | None = None
    pid: int | None = None  # the replica leader's process id, where the engine has one
    finished_at: float | None = None  # when the engine saw it end (orders simultaneous failures)
    # when the engine started it (its process, on this machine); None: unknown, the supervisor then
    # records when it first saw it running (a poll later, after its own store writes)
    started_at: float | None = None
    # it failed binding a rendezvous port the engine probed for it (another process took it first):
    # a new group on new ports is owed, not counted as a restart (phalanx.machine.ports)
    port_lost: bool = False


@dataclass(frozen=True)
class JobStatus:
    status: ExperimentStatus
    replicas: tuple[ReplicaStatus, ...] = ()
    reason: str | None = None
    # the attempt the engine runs now, where it starts a job again by itself (a Slurm requeue)
    attempt: int | None = None


def job_status(replicas: list[ReplicaStatus]) -> JobStatus:
    """A gang's status from its replicas' (engines that see replicas one by one: Kubernetes pods,
    Ray actors): the first failure (by ``finished_at``) fails it and names the replica."""
    states = [r.state for r in replicas]
    failed = [r for r in replicas if r.state is ReplicaState.FAILED]
    if failed:
        first = min(failed, key=lambda r: r.finished_at or float("inf"))
        return JobStatus(ExperimentStatus.FAILED, tuple(replicas), f"{first.name} {first.reason or 'failed'}")
    if states and all(s is ReplicaState.SUCCEEDED for s in states):
        return JobStatus(ExperimentStatus.SUCCEEDED, tuple(replicas))
    if states and all(s.done for s in states):
        return JobStatus(ExperimentStatus.STOPPED, tuple(replicas), "stopped")
    if any(s is ReplicaState.RUNNING for s in states):
        return JobStatus(ExperimentStatus.RUNNING, tuple(replicas))
    if any(s is ReplicaState.UNKNOWN for s in states):
        return JobStatus(ExperimentStatus.UNKNOWN, tuple(replicas), "a node stopped reporting")
    return JobStatus(ExperimentStatus.STARTING, tuple(replicas))


class Backend(Protocol):
    """An engine that runs a Plan: local processes, Slurm, Kubernetes, Kubeflow. The supervisor
    drives it: ``dry_run`` then ``submit``, then ``describe`` on every turn of its loop until the
    job is done, ``logs`` per replica, and ``cancel`` to stop. A handle is a string the engine
    chooses; it is stored with the experiment, so a later process (``phalanx stop``, ``phalanx logs``)
    can call ``describe``, ``logs`` and ``cancel`` with a new instance. Errors: ``SpecError`` for
    what the engine cannot express, ``BackendUnavailable`` when the engine cannot be reached (or is
    not installed), ``MissingExtra`` when its pip extra is missing. An engine whose own controller
    restarts failed replicas (the Kubeflow operators) has ``restarts_itself = True`` (every other False);
    the supervisor then does not restart on top of it."""

    name: str
    restarts_itself: bool  # (above): True for the Kubeflow operators' engines

    def dry_run(self, plan: Plan, context: LaunchContext) -> DryRun:
        """What ``submit`` would create, without touching the engine (pure, apart from choosing
        free ports for the local engine). Returns the engine's own ``DryRun`` subclass. Raises
        SpecError for what this engine cannot express (the message names the field and the fix)."""
        ...

    def submit(self, dry_run: DryRun) -> str:
        """Create exactly what ``dry_run`` describes and return the engine's handle (an attempt id,
        a Slurm job id and run folder, a namespace and name). On failure nothing is left running.
        Raises BackendUnavailable when the engine refuses or cannot be reached, UsageError for a
        dry run made by another engine."""
        ...

    def describe(self, handle: str) -> JobStatus | None:
        """The job's status and one ``ReplicaStatus`` per replica of the plan, read from the engine
        now. Its ``reason`` names the first replica that failed (by ``finished_at``). None once the
        engine has forgotten the job (deleted, or aged out of Slurm with no state left behind).
        Raises BackendUnavailable when the engine cannot be asked (a transient failure: callers
        retry)."""
        ...

    def logs(self, handle: str, replica: str, follow: bool = False) -> Iterator[str]:
        """The console lines (without newlines) of one replica of this attempt, from its start.
        Without ``follow``: what there is now. With ``follow``: waits for more until the replica
        (or the job) has ended, then yields the last partial line too and returns. Yields nothing
        for a replica with no console of its own (a rank inside an mpirun launcher) or an unknown
        name."""
        ...

    def cancel(self, handle: str) -> None:
        """Stop everything the job runs (a grace period, then kill) and free what the engine holds
        for it. Idempotent: cancelling a finished, cancelled or forgotten job does nothing. Replicas
        killed by it end STOPPED, not FAILED. Raises BackendUnavailable when the engine cannot be
        reached."""
        ...

    def discard_logs(self, handle: str) -> None:
        """Remove the engine's own copies of the job's console (every attempt's log files), called
        by the supervisor once the job has ended and the store holds every line: the console is
        kept once, in the store. A no-op for an engine that keeps no copy of its own (Kubernetes:
        the pods' logs are the kubelet's, gone with the pods). Never raises for a missing file."""
        ...

    def refuse_if_it_can_never_run(self, dry_run: DryRun) -> None:
        """UsageError when the engine would accept the job but never run it (Slurm: a job larger
        than its partition pends forever; ``sbatch --test-only`` says so), asked of one trial before
        a group on a cluster is recorded. A no-op for an engine whose dry run already refuses what
        it cannot run."""
        ...
