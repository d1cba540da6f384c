"""The door of the read and control commands (`get`, `metrics`, `params`, `artifacts`, `tag`,
`note`, `texts`, `delete`, `resume`, `plot`, `group get|ls|delete`): this machine's store (``SqlStore``,
after the read pass) or a server's API (``remote_store.RemoteStore``). Both implement it and
``cli.reading.open_target`` returns it, so the type checker proves that neither door lacks what a
command asks, and a command never asks which door it holds. ``server_url`` says which door it is,
for the little that only one side knows (a queue place on this machine's ledger)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from phalanx.domain import Experiment, Replica, Series
from phalanx.store.base import ArtifactRecord, ModelRecord, ParamRecord


class Door(Protocol):
    """Each member is documented on ``store.base.Store`` (``group_view``/``group_views``:
    ``GroupStore``); a server answers it through its API with the same method."""

    server_url: str | None

    def get_experiment(self, experiment_id: str) -> Experiment: ...

    def list_replicas(self, experiment_id: str) -> list[Replica]: ...

    def delete_experiment(self, experiment_id: str) -> None: ...

    def annotate(
        self, experiment_id: str, *, tags: Sequence[str] | None = None, notes: str | None = None
    ) -> Experiment: ...

    def metric_titles(self, experiment_id: str) -> dict[str, list[str]]: ...

    def metrics(
        self, experiment_id: str, title: str | None = None, series: str | None = None
    ) -> dict[str, dict[str, Series]]: ...

    def params(self, experiment_id: str) -> list[ParamRecord]: ...

    def texts(self, experiment_id: str) -> list[dict[str, Any]]: ...

    def artifacts(self, experiment_id: str) -> list[ArtifactRecord]: ...

    def models(self, experiment_id: str) -> list[ModelRecord]: ...

    def download_artifact(self, experiment_id: str, artifact: ArtifactRecord, directory: Path) -> Path: ...

    def run_details(self, experiment_id: str) -> dict[str, Any]: ...

    def group_view(self, group_id: str) -> dict[str, Any]: ...

    def group_views(self, limit: int = 50) -> list[dict[str, Any]]: ...

    def remove_group(self, group_id: str) -> list[str]: ...
