"""What a supervisor asks of its store (``phalanx.supervisor``): the full store
(``store.base.LocalStore``), or on an up-to-date SQLite file the lean writer
(``store.lite_writer.LiteWriter``), which records without SQLAlchemy. Each method is the
``store.base`` protocols' method of that name."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from phalanx.stragglers import PaceRecords

if TYPE_CHECKING:
    from phalanx.domain import Event, Experiment, ExperimentStatus, Replica, ReplicaState
    from phalanx.store.artifacts import ArtifactStore
    from phalanx.store.base import ArtifactRecord


class SpoolSink(Protocol):
    """Where an ``Ingester`` writes what spool files hold, exactly once (``IngestStore``'s)."""

    @property
    def artifact_store(self) -> ArtifactStore | None: ...

    def ingest_position(self, stream: str) -> tuple[int, int]: ...

    def ingest_batch(
        self, stream: str, start: int, end: int, last_seq: int, events: Sequence[Event]
    ) -> int | None: ...


class RunStore(SpoolSink, PaceRecords, Protocol):
    """The experiment's rows, attempts, what ran, and the replicas' reports (see the module)."""

    def close(self) -> None: ...

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
        status: ExperimentStatus = ...,
        created_at: float | None = None,
    ) -> Experiment: ...

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
        plan: Mapping[str, Any] | None = None,
    ) -> Experiment: ...

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
        fresh: bool = False,
    ) -> None: ...

    def reopen_experiment(self, experiment_id: str) -> Experiment: ...

    def delete_experiment(self, experiment_id: str) -> None: ...

    def add_attempt(
        self,
        experiment_id: str,
        *,
        kind: str,
        checkpoint_step: int | None = None,
        started_at: float | None = None,
    ) -> int: ...

    def finish_attempt(
        self, experiment_id: str, number: int, *, status: ExperimentStatus, reason: str | None = None
    ) -> None: ...

    def attempts(self, experiment_id: str) -> list[dict[str, Any]]: ...

    def set_repro(self, experiment_id: str, repro: Mapping[str, Any]) -> None: ...

    def repro(self, experiment_id: str) -> dict[str, Any]: ...

    def artifacts(self, experiment_id: str) -> list[ArtifactRecord]: ...

    def notice(self, experiment_id: str, kind: str, replica: str | None, text: str) -> None: ...
