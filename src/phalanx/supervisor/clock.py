"""The supervisor's clock: how long the experiment's replicas have run (max_run_seconds) and how
long it has been supervised (shown with the replicas' states).

max_run_seconds counts the time the experiment's replicas ran, every attempt's together, and the same
way for both decisions it takes part in: stopping a running group and restarting a failed one. Time
pending in a cluster's queue (Slurm, Kubernetes) or waiting in this machine's queue is not the
experiment's: a job pending behind another neither fails for it nor loses its restarts to it.
"""

from __future__ import annotations

import time


class RunClock:
    def __init__(self) -> None:
        self.started = time.monotonic()  # what the replicas' states are shown "elapsed" from
        self._ran_seconds = 0.0  # time the replicas of finished attempts ran
        self._running_since: float | None = None  # the current attempt runs (not pending) since

    def restart(self) -> None:
        """Admitted from the machine's queue: the time it waited is not shown as elapsed."""
        self.started = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def running(self) -> None:
        """The current attempt runs (not pending): its time counts from now, if not already."""
        if self._running_since is None:
            self._running_since = time.monotonic()

    def pause(self) -> None:
        """The attempt has ended or is pending (again, after a requeue): its running time is counted."""
        if self._running_since is not None:
            self._ran_seconds += time.monotonic() - self._running_since
            self._running_since = None

    def run_seconds(self) -> float:
        """How long the experiment's replicas have run, over every attempt so far."""
        now = time.monotonic()
        return self._ran_seconds + (now - self._running_since if self._running_since is not None else 0.0)

    def past(self, limit: float | None) -> bool:
        """Whether the replicas have run ``limit`` seconds already (None or 0: no limit)."""
        return bool(limit) and self.run_seconds() >= (limit or 0)
