"""What the supervisor's collaborators are handed in their unit tests, besides real parts (a SQLite
store, a spool folder, the machine's ledger file): a terminal that remembers what it was told."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from phalanx.domain import ReplicaState
from phalanx.spool import read_records


class FakeObserver:
    """The terminal, as lists of what the supervisor told it."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []
        self.messages: list[str] = []
        self.shown: list[dict[str, ReplicaState]] = []

    def line(self, replica: str, text: str) -> None:
        self.lines.append((replica, text))

    def states(self, replicas: Mapping[str, ReplicaState], elapsed: float) -> None:
        self.shown.append(dict(replicas))

    def message(self, text: str) -> None:
        self.messages.append(text)

    def flush(self) -> None:
        return None


def spooled(spool_dir: Path, kind: str | None = None) -> list[dict[str, Any]]:
    """Every record in the folder's spool files (of ``kind``, if given), stream by stream."""
    out: list[dict[str, Any]] = []
    for path in sorted(spool_dir.glob("*.spool")):
        records, _ = read_records(path, 0)
        out.extend(r for r in records if r is not None and (kind is None or r["kind"] == kind))
    return out
