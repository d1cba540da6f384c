"""An experiment's run details: its attempts (with what each ran), what ran (git, versions, host,
launch, snapshot) and the pace of each rank. `phalanx get` shows them and the API's
``/experiments/ID/run`` answers them; ``Store.run_details`` is the capability, this module the
SQL store's side of it (a server's ``RemoteStore`` asks that route)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from phalanx import repro as repros
from phalanx.stragglers import PaceRecords, pace

if TYPE_CHECKING:
    from phalanx.store.artifacts import ArtifactStore


class RunRecords(PaceRecords, Protocol):
    """The reads run details are made of: the full store's (``SqlStore``) or the lean reader's
    (``LiteReader``, `phalanx get` without SQLAlchemy)."""

    @property
    def artifact_store(self) -> ArtifactStore | None: ...

    def repro(self, experiment_id: str) -> dict[str, Any]: ...

    def attempts(self, experiment_id: str) -> list[dict[str, Any]]: ...

    def replica_starts(self, experiment_id: str) -> dict[str, int]: ...


def run_details(store: RunRecords, experiment_id: str) -> dict[str, Any]:
    """Attempts, what ran (git, versions, host) and the pace of each rank."""
    repro = store.repro(experiment_id)
    git = dict(repro.get("git") or {})
    git.pop("diff", None)  # `phalanx diff` shows code; get stays short
    source = {
        "git": git or None,
        "python": repro.get("python"),
        "phalanx": repro.get("phalanx"),
        "host": repro.get("host"),
        "packages": len(repro.get("packages") or []),
        "snapshot": repro.get("snapshot"),
        "launch": repro.get("launch"),
    }
    attempts = store.attempts(experiment_id)
    code = _attempt_code(store, experiment_id, repro)
    for a in attempts:  # what each attempt ran, where `phalanx resume` recorded it (docs/checkpoints.md)
        if a["number"] in code:
            a["code"] = code[a["number"]]
    return {
        "attempts": attempts,
        "pod_attempts": store.replica_starts(experiment_id),
        "source": source if repro else None,
        "pace": pace(store, experiment_id),
    }


def _attempt_code(store: RunRecords, experiment_id: str, record: dict[str, Any]) -> dict[int, dict[str, Any]]:
    def read(path: str) -> bytes | None:
        artifacts = store.artifact_store  # opened only for a resumed run's snapshots
        if artifacts is None or not artifacts.exists(experiment_id, path):
            return None
        return bytes(artifacts.read_bytes(experiment_id, path))

    try:
        return repros.attempt_changes(record, read)
    except Exception:  # an unreadable snapshot must not take `get` down
        return {}
