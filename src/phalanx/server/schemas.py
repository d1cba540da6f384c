"""The REST API's shapes (pydantic). Only the server uses these; they are built from the domain
dataclasses and store records, never from table rows."""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, Field

from phalanx.domain import Experiment, LogLine, Replica
from phalanx.store.base import ArtifactRecord, ModelRecord, ParamRecord
from phalanx.store.paramshape import shown


class ErrorOut(BaseModel):
    error: str = Field(description="a stable code: not_found, conflict, usage, unauthorized, ...")
    message: str


class ReplicaOut(BaseModel):
    name: str
    role: str
    index: int
    rank: int | None
    state: str
    host: str | None = None
    pid: int | None = None
    exit_code: int | None = None
    reason: str | None = None
    resources: dict[str, Any] = Field(default_factory=dict)
    started_at: float | None = None
    finished_at: float | None = None

    @classmethod
    def of(cls, r: Replica) -> ReplicaOut:
        return cls(
            name=r.name,
            role=str(r.role),
            index=r.index,
            rank=r.rank,
            state=str(r.state),
            host=r.host,
            pid=r.pid,
            exit_code=r.exit_code,
            reason=r.reason,
            resources=dict(r.resources),
            started_at=r.started_at,
            finished_at=r.finished_at,
        )


class ExperimentOut(BaseModel):
    id: str
    name: str
    project: str
    status: str
    framework: str | None = None
    backend: str | None = None
    cluster: str | None = None
    tags: list[str] = Field(default_factory=list)
    topology: dict[str, int] = Field(default_factory=dict)
    reason: str | None = None
    created_at: float | None = None
    started_at: float | None = None
    finished_at: float | None = None
    notes: str | None = None
    columns: dict[str, Any] = Field(
        default_factory=dict, description="the param/metric columns asked for (param:KEY, metric:AGG:TITLE)"
    )
    group_id: str | None = Field(
        default=None, description="the experiment group (hyperparameter search) it is a trial of, if any"
    )
    kind: str = Field(
        default="training", description='"training", or "service": a `phalanx serve` session (docs/models.md)'
    )


class ExperimentDetail(ExperimentOut):
    spec_text: str | None = None
    plan: dict[str, Any] = Field(default_factory=dict)
    handle: str | None = None
    replicas: list[ReplicaOut] = Field(default_factory=list)
    launched_by: str | None = Field(default=None, description="who submitted it to this server, if anyone")


def experiment_out(e: Experiment) -> dict[str, Any]:
    return {
        "id": e.id,
        "name": e.name,
        "project": e.project,
        "status": str(e.status),
        "framework": e.framework,
        "backend": e.backend,
        "cluster": e.cluster,
        "tags": list(e.tags),
        "topology": dict(e.topology),
        "reason": e.reason,
        "created_at": e.created_at,
        "started_at": e.started_at,
        "finished_at": e.finished_at,
        "notes": e.notes,
        "group_id": e.group_id,
        "kind": e.kind,
    }


class ExperimentPage(BaseModel):
    items: list[ExperimentOut]
    total: int
    offset: int
    limit: int


class ResumedOut(BaseModel):
    id: str
    status: str = Field(description="its status once its supervisor has reopened it (resuming, running...)")


class StopOut(BaseModel):
    id: str
    status: str
    stop_requested: bool = Field(description="true when a stop request was handed to the supervisor")
    message: str


class MetricTitles(BaseModel):
    titles: dict[str, list[str]] = Field(description="title -> its series names")


class SeriesOut(BaseModel):
    steps: list[int]
    values: list[float | None] = Field(description="null where the reported value was NaN or infinite")
    times: list[float]
    count: int = Field(description="how many points the series holds before downsampling")
    downsampled: bool


class MetricOut(BaseModel):
    title: str
    x: Literal["step", "time"]
    series: dict[str, SeriesOut]


def finite_or_none(v: float) -> float | None:
    return v if math.isfinite(v) else None


class ParamOut(BaseModel):
    section: str
    key: str
    value: Any
    replica: str
    rank: int | None
    time: float
    conflict: str | None = Field(
        default=None,
        description="a declared value (section Declared/Trial) the script reported differently: "
        "what the other side says",
    )

    @classmethod
    def of(cls, p: ParamRecord, conflict: str | None = None) -> ParamOut:
        value = shown(p.value)  # one value stored before the bounds must not break the page
        return cls(
            section=p.section,
            key=p.key,
            value=value,
            replica=p.replica,
            rank=p.rank,
            time=p.time,
            conflict=conflict,
        )


class ArtifactOut(BaseModel):
    name: str
    kind: str
    path: str
    size: int
    content_type: str
    replica: str
    rank: int | None
    time: float
    metadata: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def of(cls, a: ArtifactRecord) -> ArtifactOut:
        return cls(
            name=a.name,
            kind=a.kind,
            path=a.path,
            size=a.size,
            content_type=a.content_type,
            replica=a.replica,
            rank=a.rank,
            time=a.time,
            metadata=dict(a.metadata),
        )


class ModelOut(BaseModel):
    name: str
    format: str
    path: str
    size: int
    replica: str
    time: float
    metadata: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def of(cls, m: ModelRecord) -> ModelOut:
        return cls(
            name=m.name,
            format=m.format,
            path=m.path,
            size=m.size,
            replica=m.replica,
            time=m.time,
            metadata=dict(m.metadata),
        )


class LogLineOut(BaseModel):
    offset: int
    replica: str
    text: str
    time: float
    stream: str

    @classmethod
    def of(cls, line: LogLine) -> LogLineOut:
        return cls(
            offset=line.offset, replica=line.replica, text=line.text, time=line.time, stream=line.stream
        )


class LogsOut(BaseModel):
    lines: list[LogLineOut]
    next_offset: int = Field(description="the offset to ask for next (per replica when one was given)")


class IngestIn(BaseModel):
    events: list[dict[str, Any]] = Field(description="spool records, as the tracking SDK writes them")


class IngestOut(BaseModel):
    accepted: int = Field(description="how many events were new (a resent batch is accepted as 0)")


class FileOut(BaseModel):
    path: str
    size: int


class AnnotateIn(BaseModel):
    tags: list[str] | None = Field(default=None, max_length=100, description="the new tags (all of them)")
    notes: str | None = Field(default=None, max_length=100_000, description="the new notes")


class TextOut(BaseModel):
    title: str
    text: str
    step: int | None = None
    replica: str
    rank: int | None = None
    time: float


class ColumnsOut(BaseModel):
    params: list[str]
    metrics: list[str]


class AttemptIn(BaseModel):
    """A pod's container starting (again): which replica it is, and the group's attempt, if any."""

    replica: str = Field(
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9_.-]+$",
        description="the replica starting (PHALANX_REPLICA: master, worker-0, ...)",
    )
    at_least: int = Field(
        0, ge=0, le=2**31 - 1, description="the attempt the supervisor gave the group (PHALANX_ATTEMPT)"
    )


class AttemptOut(BaseModel):
    attempt: int = Field(description="this start's PHALANX_ATTEMPT: higher than every earlier start's")
