"""The vocabulary every layer shares: frozen dataclasses and string enums.

Nothing here does I/O or imports a third-party package, so the spec, the planner, the backends, the
store and the server all speak the same names (one concept, one name).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any, Generic, TypedDict, TypeVar


class Framework(StrEnum):
    PYTORCH = "pytorch"
    TENSORFLOW = "tensorflow"
    MXNET = "mxnet"
    HOROVOD = "horovod"


class BackendKind(StrEnum):
    """The `backend:` key of the file: how a distributed experiment is started on a cluster."""

    NATIVE = "native"
    KUBEFLOW = "kubeflow"
    MPI = "mpi"


class Role(StrEnum):
    MASTER = "master"
    WORKER = "worker"
    PS = "ps"


class ExperimentStatus(StrEnum):
    CREATED = "created"
    STARTING = "starting"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"
    UNKNOWN = "unknown"
    QUEUED = "queued"  # waiting in this machine's queue for its cores, GPUs or memory (machine.ledger)
    PENDING = "pending"  # accepted by a cluster's scheduler, waiting for resources (reason says why)
    BUILDING = "building"  # its environment (build.pip_packages, Horovod) is being built first

    @property
    def done(self) -> bool:
        return self in (ExperimentStatus.SUCCEEDED, ExperimentStatus.FAILED, ExperimentStatus.STOPPED)

    @property
    def resumable(self) -> bool:
        """`phalanx resume` continues only a failed or stopped experiment."""
        return self in (ExperimentStatus.FAILED, ExperimentStatus.STOPPED)


class ReplicaState(StrEnum):
    PENDING = "pending"
    STARTING = "starting"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"
    UNKNOWN = "unknown"

    @property
    def done(self) -> bool:
        return self in (ReplicaState.SUCCEEDED, ReplicaState.FAILED, ReplicaState.STOPPED)


@dataclass(frozen=True)
class Range:
    """A `{requests, limits}` pair; None where the file sets nothing."""

    requests: float | None = None
    limits: float | None = None

    def to_json(self) -> dict[str, float | int | None]:
        return {"requests": _num(self.requests), "limits": _num(self.limits)}


def _num(value: float | None) -> float | int | None:
    """Render 2.0 as 2 so JSON shows what the user wrote."""
    if value is None:
        return None
    return int(value) if float(value).is_integer() else value


@dataclass(frozen=True)
class Resources:
    """cpu in cores, memory in MiB, gpu in devices."""

    cpu: Range = field(default_factory=Range)
    memory: Range = field(default_factory=Range)
    gpu: Range = field(default_factory=Range)

    def to_json(self) -> dict[str, dict[str, float | int | None]]:
        return {"cpu": self.cpu.to_json(), "memory": self.memory.to_json(), "gpu": self.gpu.to_json()}


@dataclass(frozen=True)
class Experiment:
    """An experiment as the store holds it."""

    id: str
    name: str
    project: str
    status: ExperimentStatus
    framework: str | None = None
    backend: str | None = None
    cluster: str | None = None
    tags: tuple[str, ...] = ()
    topology: Mapping[str, int] = field(default_factory=dict)  # {"master": 1, "worker": 3, "ps": 1}
    spec_text: str | None = None  # the experiment file as the user wrote it
    plan: Mapping[str, Any] = field(default_factory=dict)  # the expanded plan as JSON
    reason: str | None = None  # why it failed or stopped
    created_at: float | None = None
    started_at: float | None = None
    finished_at: float | None = None
    handle: str | None = None  # the backend's own id (pid, Slurm job id, pod label)
    notes: str | None = None  # free text the user wrote about it (UI, `phalanx note`)
    group_id: str | None = None  # the experiment group (hyperparameter search) it is a trial of
    kind: str = "training"  # or "service": one `phalanx serve` session's requests and latency

    def to_json(self) -> dict[str, Any]:
        """The experiment as `phalanx get -o json` and the Python Run handle show it."""
        doc = {
            "id": self.id,
            "name": self.name,
            "project": self.project,
            "status": str(self.status),
            "reason": self.reason,
            "framework": self.framework,
            "backend": self.backend,
            "cluster": self.cluster,
            "tags": list(self.tags),
            "topology": dict(self.topology),
            "created_at": self.created_at,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "notes": self.notes,
            # every experiment carries both, as the REST API's ExperimentOut does: one set of keys
            # for a trial, a plain run and a `phalanx serve` session, on every path and door
            "group_id": self.group_id,
            "kind": self.kind,
        }
        return doc


@dataclass(frozen=True)
class Replica:
    """One replica of an experiment as the store holds it."""

    experiment_id: str
    name: str  # "master", "worker-0", "ps-1"
    role: Role
    index: int
    rank: int | None
    state: ReplicaState = ReplicaState.PENDING
    host: str | None = None
    pid: int | None = None
    exit_code: int | None = None
    reason: str | None = None
    resources: Mapping[str, Any] = field(default_factory=dict)
    started_at: float | None = None
    finished_at: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "role": str(self.role),
            "index": self.index,
            "rank": self.rank,
            "state": str(self.state),
            "exit_code": self.exit_code,
            "reason": self.reason,
            "host": self.host,
            "pid": self.pid,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
        }


# The sections holding an experiment's declared params (what its file's ``params`` or its estimator's
# ``script_params`` said, after `--param`; a group trial's sampled values), recorded at launch. What
# the script reports (Args, General, ...) stays in its own sections; ``param:KEY`` reads a reported
# value first and a declared one when the script reported none (docs/run-table.md).
DECLARED_PARAMS = "Declared"
TRIAL_PARAMS = "Trial"
DECLARED_SECTIONS = (DECLARED_PARAMS, TRIAL_PARAMS)

# The console source of an environment build's lines (what pip installs, its heartbeat), read like a
# replica's console before the replicas' own: `phalanx logs ID`, `logs -f`, the API, the UI.
BUILD_CONSOLE = "build"


def plural(n: int, noun: str, nouns: str | None = None) -> str:
    """``n`` with its noun as a message says it: "1 trial", "0 trials", "3 replicas" (``nouns``: an
    irregular plural, "processes"). Every layer's messages use it: here because all of them import
    this module."""
    return f"{n} {noun if n == 1 else nouns or noun + 's'}"


def console_sources(replicas: Sequence[str]) -> list[str]:
    """The names an experiment's console is read by, in order: its build's, then ``replicas``'."""
    return [BUILD_CONSOLE, *(name for name in replicas if name != BUILD_CONSOLE)]


@dataclass(frozen=True)
class Series:
    """One scalar series, columns as parallel lists (cheap to serialise, cheap to plot)."""

    steps: list[int]
    values: list[float]
    times: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class LogLine:
    """A line of a console (a replica's, the build's)."""

    offset: int  # position of the line in its replica's log, 0-based, stable
    replica: str
    text: str
    time: float
    stream: str = "stdout"


class EventKind(StrEnum):
    """What a tracking event carries; the store has one write primitive, a batch of these."""

    SCALAR = "scalar"  # title, series, step, value
    PARAM = "param"  # section, key, value
    ARTIFACT = "artifact"  # name, kind, path in the artifact store, size, content type
    MODEL = "model"  # name, format, path, metadata
    LOG = "log"  # stream, text
    TEXT = "text"  # report_text: title, text
    STATUS = "status"  # experiment status decided by a main process (plain `python script.py`)
    EXPERIMENT = "experiment"  # an experiment created by Task.init outside `phalanx run`
    REPRO = "repro"  # what a plain script ran (phalanx.repro record); its source snapshot a file


@dataclass(frozen=True)
class Event:
    """One fact a replica reported. ``stream`` + ``seq`` identify it so ingest is exactly once."""

    experiment_id: str
    kind: EventKind
    data: Mapping[str, Any]
    replica: str = "master"
    role: str = "master"
    index: int = 0
    rank: int | None = None
    time: float = 0.0
    stream: str = ""  # the writing process's spool stream id
    seq: int = 0  # its sequence number inside the stream
    attempt: int | None = None  # the writer's attempt (PHALANX_ATTEMPT): a later one replaces steps


T = TypeVar("T")


@dataclass(frozen=True)
class Page(Generic[T]):
    items: Sequence[T]
    total: int
    offset: int = 0
    limit: int = 50


# -- experiment groups (hyperparameter searches): what the store keeps of a group and its trials --


@dataclass(frozen=True)
class ExperimentFilter:
    """Which experiments a listing asks for, and in what order and page."""

    status: ExperimentStatus | None = None
    project: str | None = None
    tag: str | None = None
    text: str | None = None  # matches id, name or project
    offset: int = 0
    limit: int = 50
    order_by: str = "-created_at"
    group_id: str | None = None  # only the trials of this experiment group
    projects: tuple[str, ...] | None = None  # only these projects (a team member's); None: any
    ids: tuple[str, ...] | None = None  # only these full ids (Compare's runs); None: any


class GroupStatus(StrEnum):
    """A group's life: created (recorded, no controller yet), running (a controller drives it), then
    one of the three ends."""

    CREATED = "created"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    STOPPED = "stopped"
    FAILED = "failed"

    @property
    def done(self) -> bool:
        return self in (GroupStatus.SUCCEEDED, GroupStatus.STOPPED, GroupStatus.FAILED)


GROUP_DONE = (GroupStatus.SUCCEEDED, GroupStatus.STOPPED, GroupStatus.FAILED)


class TrialState(StrEnum):
    """A trial's life in its group: launching (recorded with the experiment id it is about to use,
    before the launch), running, then done (succeeded; its value is the metric's last, or none),
    pruned, failed or stopped (by `group stop` or early stopping)."""

    LAUNCHING = "launching"
    RUNNING = "running"
    DONE = "done"
    PRUNED = "pruned"
    FAILED = "failed"
    STOPPED = "stopped"

    @property
    def finished(self) -> bool:
        return self not in (TrialState.LAUNCHING, TrialState.RUNNING)


@dataclass(frozen=True)
class Trial:
    group_id: str
    number: int
    experiment_id: str
    params: Mapping[str, Any]
    state: TrialState
    value: float | None = None
    step: int | None = None
    reason: str | None = None
    internal: Mapping[str, Any] = field(default_factory=dict)
    created_at: float = 0.0
    finished_at: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "state", TrialState(self.state))  # a stored string becomes the enum

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc.pop("internal")
        doc["params"] = dict(self.params)
        doc["state"] = str(self.state)
        return doc


@dataclass(frozen=True)
class Group:
    id: str
    name: str
    project: str
    status: GroupStatus
    search: str
    planned: int
    concurrency: int
    metric: str | None
    optimization: str | None
    spec_text: str
    source_file: str | None
    workdir: str | None
    options: Mapping[str, Any]
    reason: str | None
    controller_pid: int | None
    controller_host: str | None
    stop_requested: bool
    created_at: float
    finished_at: float | None

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", GroupStatus(self.status))

    @property
    def done(self) -> bool:
        return self.status.done

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc.pop("spec_text")
        doc["options"] = dict(self.options)
        doc["status"] = str(self.status)
        return doc


class GroupUpdate(TypedDict, total=False):
    """The fields ``GroupStore.update_group`` may set: a key given is written (None clears it, as
    ``controller_pid=None`` does when the controller ends); a key left out is unchanged."""

    status: GroupStatus
    reason: str | None
    controller_pid: int | None
    controller_host: str | None
    stop_requested: bool
    finished_at: float | None


class TrialUpdate(TypedDict, total=False):
    """The fields ``GroupStore.update_trial`` may set: a key given is written (None clears it); a key
    left out is unchanged."""

    state: TrialState
    value: float | None
    step: int | None
    reason: str | None
    internal: Mapping[str, Any]
    finished_at: float | None


def best_trial(trials: Sequence[Trial], optimization: str | None) -> Trial | None:
    """The finished (not pruned) trial with the best metric value."""
    scored = [t for t in trials if t.state is TrialState.DONE and t.value is not None]
    if not scored:
        return None
    pick = max if optimization == "maximize" else min
    return pick(scored, key=lambda t: t.value)  # type: ignore[arg-type,return-value]


def trial_counts(trials: Sequence[Trial]) -> dict[str, int]:
    """How many of ``trials`` are in each state, every state named (0 included)."""
    return {str(s): sum(1 for t in trials if t.state is s) for s in TrialState}
