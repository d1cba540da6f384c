"""What a supervision ends with (Outcome, its exit code) and who watches it (Observer): shared by
the supervisor, the runner and the CLI."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from phalanx.domain import ExperimentStatus, ReplicaState

log = logging.getLogger(__name__)

PID_FILE = "supervisor.pid"  # "pid start-time host" of the supervisor (phalanx.machine.procs.record_process)

EXIT_CODES = {ExperimentStatus.SUCCEEDED: 0, ExperimentStatus.FAILED: 1, ExperimentStatus.STOPPED: 130}


@dataclass(frozen=True)
class Outcome:
    experiment_id: str
    status: ExperimentStatus
    reason: str | None = None
    restarts: int = 0

    @property
    def exit_code(self) -> int:
        """0 succeeded, 1 failed, 130 stopped (what `phalanx run` exits with)."""
        return EXIT_CODES.get(self.status, 1)


class Observer(Protocol):
    """What the supervisor tells the terminal (or a notebook); every call comes from one thread at a
    time for a given replica, but lines of different replicas arrive from different threads."""

    def line(self, replica: str, text: str) -> None: ...

    def states(self, replicas: Mapping[str, ReplicaState], elapsed: float) -> None: ...

    def message(self, text: str) -> None: ...

    def flush(self) -> None:
        """What ``line`` took reaches its reader now (the supervisor calls it at every poll and at
        the end): an echo may keep a chatty replica's lines and write them together."""


class LoggingObserver:
    """The default observer: Python logging (for API users without a terminal)."""

    def line(self, replica: str, text: str) -> None:
        log.info("[%s] %s", replica, text)

    def states(self, replicas: Mapping[str, ReplicaState], elapsed: float) -> None:
        return None

    def message(self, text: str) -> None:
        log.info("%s", text)

    def flush(self) -> None:
        return None


class Shielded:
    """An observer whose failures are its own: a terminal closed under ``phalanx run ... | head``
    (EPIPE), hung up (EIO) or a full disk behind a redirect must stop the echo, never the
    supervisor, which still writes every line to the spool. The first failure is logged, then the
    observer is left alone."""

    def __init__(self, inner: Observer) -> None:
        self.inner = inner
        self.broken = False

    def _call(self, method: str, *args: Any) -> None:
        if self.broken:
            return
        try:
            getattr(self.inner, method)(*args)
        except Exception as exc:
            self.broken = True
            log.warning("the console stopped taking output (%s); the experiment goes on", exc)

    def line(self, replica: str, text: str) -> None:
        self._call("line", replica, text)

    def states(self, replicas: Mapping[str, ReplicaState], elapsed: float) -> None:
        self._call("states", replicas, elapsed)

    def message(self, text: str) -> None:
        self._call("message", text)

    def flush(self) -> None:
        # an observer written before flush() was part of the protocol (a Runner.run caller's) shows
        # each line as it comes: nothing to flush, not a failure that stops its echo
        if hasattr(self.inner, "flush"):
            self._call("flush")
