"""The Store protocol: what every layer may ask of the store, and nothing more.

One write primitive for what replicas report (``write_events``, a batch, idempotent on each event's
(stream, seq)); experiment and replica rows are written only by the supervisor (and by ingest of a
plain script's EXPERIMENT/STATUS events). Searches return pages. The store owns its transactions.
Implementations: ``store.sql.SqlStore`` (SQLite by default, PostgreSQL with PHALANX_DB_URL).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from phalanx.domain import Event, Experiment, ExperimentStatus, Page, Replica, ReplicaState


@dataclass(frozen=True)
class Series:
    """One scalar series, columns as parallel lists (cheap to serialise, cheap to plot)."""

    steps: list[int]
    values: list[float]
    times: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class SeriesView:
    """One series as a chart shows it: at most about ``max_points`` points of a window, from the
    stored summary (min/max per bucket) when the window holds more; ``count``: points in all."""

    series: Series
    count: int
    downsampled: bool


@dataclass(frozen=True)
class ParamRecord:
    section: str  # "Args", "General", or a connect(name=...) section
    key: str
    value: Any
    replica: str
    rank: int | None
    time: float


def merge_params(records: Iterable[ParamRecord]) -> list[ParamRecord]:
    """Merge append-only parameter reports, given oldest first.

    Per (section, key) and writer (replica, rank) the writer's latest report counts. When every
    writer's value is the same the key reads as one record (the latest report); when they differ
    (each rank records ``--rank`` or its own seed) it reads as one record per writer, so no rank's
    value is hidden. Sorted by section, key, then rank and replica.
    """
    latest: dict[tuple[str, str], dict[tuple[str, int | None], ParamRecord]] = {}
    for p in records:
        by_writer = latest.setdefault((p.section, p.key), {})
        by_writer.pop((p.replica, p.rank), None)  # re-insert: the dict's last entry is the latest report
        by_writer[(p.replica, p.rank)] = p
    out: list[ParamRecord] = []
    for k in sorted(latest):
        reports = list(latest[k].values())
        if len({_canonical(p.value) for p in reports}) == 1:
            out.append(reports[-1])
        else:
            out.extend(sorted(reports, key=_writer_order))
    return out


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _writer_order(p: ParamRecord) -> tuple[bool, int, str]:
    return (p.rank is None, p.rank or 0, p.replica)


@dataclass(frozen=True)
class ArtifactRecord:
    name: str
    kind: str  # "json", "file", "folder", "numpy", "pandas", "image", "bytes", "text"
    path: str  # path inside the experiment's artifact folder
    size: int
    content_type: str
    replica: str
    rank: int | None
    time: float
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ModelRecord:
    name: str
    format: str  # "pytorch", "onnx"
    path: str
    size: int
    replica: str
    time: float
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class LogLine:
    offset: int  # position of the line in its replica's log, 0-based, stable
    replica: str
    text: str
    time: float
    stream: str = "stdout"


@dataclass(frozen=True)
class ExperimentFilter:
    status: ExperimentStatus | None = None
    project: str | None = None
    tag: str | None = None
    text: str | None = None  # matches id, name or project
    offset: int = 0
    limit: int = 50
    order_by: str = "-created_at"


class Store(Protocol):
    def create_experiment(
        self,
        *,
        name: str,
        project: str,
        replicas: Sequence[Replica] = (),
        experiment_id: str | None = None,
        framework: str | None = None,
        backend: str | None = None,
        cluster: str | None = None,
        tags: Sequence[str] = (),
        topology: Mapping[str, int] | None = None,
        spec_text: str | None = None,
        plan: Mapping[str, Any] | None = None,
        status: ExperimentStatus = ExperimentStatus.CREATED,
    ) -> Experiment:
        """Create an experiment (and its replica rows). Conflict if experiment_id exists."""
        ...

    def get_experiment(self, experiment_id: str) -> Experiment:
        """Raises NotFound. Accepts a unique id prefix, as git does."""
        ...

    def list_experiments(self, query: ExperimentFilter | None = None) -> Page[Experiment]: ...

    def update_experiment(
        self,
        experiment_id: str,
        *,
        status: ExperimentStatus | None = None,
        reason: str | None = None,
        started_at: float | None = None,
        finished_at: float | None = None,
        handle: str | None = None,
        cluster: str | None = None,
    ) -> Experiment: ...

    def delete_experiment(self, experiment_id: str) -> None:
        """Removes rows and artifacts. Conflict while the experiment is running."""
        ...

    def list_replicas(self, experiment_id: str) -> list[Replica]: ...

    def update_replica(
        self,
        experiment_id: str,
        name: str,
        *,
        state: ReplicaState | None = None,
        host: str | None = None,
        pid: int | None = None,
        exit_code: int | None = None,
        reason: str | None = None,
        started_at: float | None = None,
        finished_at: float | None = None,
    ) -> None: ...

    def write_events(self, events: Sequence[Event]) -> int:
        """Store a batch in one transaction; events whose (stream, seq) is stored are skipped.
        Returns how many were new."""
        ...

    def metric_titles(self, experiment_id: str) -> dict[str, list[str]]:
        """title -> its series names."""
        ...

    def metrics(
        self, experiment_id: str, title: str | None = None, series: str | None = None
    ) -> dict[str, dict[str, Series]]:
        """title -> series -> points ordered by step."""
        ...

    def metric_view(
        self,
        experiment_id: str,
        title: str,
        *,
        series: str | None = None,
        x: str = "step",
        x_min: float | None = None,
        x_max: float | None = None,
        max_points: int = 1000,
    ) -> dict[str, SeriesView]:
        """series -> what a chart of ``max_points`` needs in the window: reads the multi-resolution
        summary, never more raw points than ``max_points`` (charts of millions of points)."""
        ...

    def experiment_columns(self, ids: Sequence[str], columns: Sequence[str]) -> dict[str, dict[str, Any]]:
        """id -> column -> value for the run table: ``param:KEY`` and ``metric:AGG:TITLE`` columns
        (AGG last/min/max, from the summary: never the points). Missing values are absent."""
        ...

    def column_names(self) -> dict[str, list[str]]:
        """{"params": keys, "metrics": titles} that experiments reported (the column chooser)."""
        ...

    def annotate(
        self, experiment_id: str, *, tags: Sequence[str] | None = None, notes: str | None = None
    ) -> Experiment:
        """Replace the tags and/or the notes the user keeps on an experiment (None: unchanged)."""
        ...

    def texts(self, experiment_id: str) -> list[dict[str, Any]]:
        """report_text messages: title, text, step, replica, rank, time; oldest first."""
        ...

    def params(self, experiment_id: str) -> list[ParamRecord]: ...

    def artifacts(self, experiment_id: str) -> list[ArtifactRecord]: ...

    def models(self, experiment_id: str) -> list[ModelRecord]: ...

    def logs(
        self, experiment_id: str, replica: str | None = None, offset: int = 0, limit: int | None = None
    ) -> list[LogLine]: ...
