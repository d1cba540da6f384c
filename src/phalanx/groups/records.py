"""The group controller's records: a group and its trials as the store keeps them (domain values,
no storage code). The store reads and writes them through ``store.base.GroupStore``; only the store
package knows SQLAlchemy."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, TypedDict

GROUP_DONE = ("succeeded", "stopped", "failed")


@dataclass(frozen=True)
class Trial:
    group_id: str
    number: int
    experiment_id: str
    params: Mapping[str, Any]
    state: str  # launching, running, done, pruned, failed
    value: float | None = None
    step: int | None = None
    reason: str | None = None
    internal: Mapping[str, Any] = field(default_factory=dict)
    created_at: float = 0.0
    finished_at: float | None = None

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc.pop("internal")
        doc["params"] = dict(self.params)
        return doc


@dataclass(frozen=True)
class Group:
    id: str
    name: str
    project: str
    status: str  # created, running, succeeded, stopped, failed
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

    @property
    def done(self) -> bool:
        return self.status in GROUP_DONE

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc.pop("spec_text")
        doc["options"] = dict(self.options)
        return doc


class GroupUpdate(TypedDict, total=False):
    """The fields ``GroupStore.update_group`` may set: a key given is written (None clears it, as
    ``controller_pid=None`` does when the controller ends); a key left out is unchanged."""

    status: str
    reason: str | None
    controller_pid: int | None
    controller_host: str | None
    stop_requested: bool
    finished_at: float | None


class TrialUpdate(TypedDict, total=False):
    """The fields ``GroupStore.update_trial`` may set: a key given is written (None clears it); a key
    left out is unchanged."""

    state: str
    value: float | None
    step: int | None
    reason: str | None
    internal: Mapping[str, Any]
    finished_at: float | None


def best_trial(trials: list[Trial], optimization: str | None) -> Trial | None:
    """The finished (not pruned) trial with the best metric value."""
    scored = [t for t in trials if t.state == "done" and t.value is not None]
    if not scored:
        return None
    pick = max if optimization == "maximize" else min
    return pick(scored, key=lambda t: t.value)  # type: ignore[arg-type,return-value]


__all__ = ["GROUP_DONE", "Group", "GroupUpdate", "Trial", "TrialUpdate", "best_trial"]
