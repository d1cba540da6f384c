"""One cheap ``squeue`` per poll interval, shared by every experiment a process watches.

A supervisor asks its engine for the job's state ten times a second, and so does every log follower;
asking slurmctld each time (the first version did: about 10 queries a second per experiment) is what
admins throttle users for. Instead, one ``squeue -h -t all`` of every job this cluster config knows
is taken at most once per interval and answers every ``describe`` until the next one. The interval
starts at ``BASE_SECONDS`` and backs off (x1.5 up to ``MAX_SECONDS``) while nothing changes; a change
resets it. How the job's tasks end is read from the run folder's state files on every call (no query),
so failures and success are still seen at once.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

BASE_SECONDS = 2.0
MAX_SECONDS = 10.0
BACKOFF = 1.5


@dataclass(frozen=True)
class QueuedJob:
    state: str  # squeue's %T: PENDING, RUNNING, COMPLETED...
    reason: str  # squeue's %r: Resources, Priority, PartitionConfig, None...


Runner = Callable[[list[str]], subprocess.CompletedProcess[str]]


class SlurmQueue:
    """The last ``squeue`` snapshot of one cluster, refreshed at most once per interval."""

    def __init__(self, run: Runner, clock: Callable[[], float] = time.monotonic) -> None:
        self._run = run
        self._clock = clock
        self._lock = threading.Lock()
        self._jobs: dict[str, QueuedJob] = {}
        self._taken: float | None = None
        self.interval = BASE_SECONDS
        self.queries = 0  # squeue calls made (tests bound it)

    def job(self, job_id: str, submitted_at: float | None = None) -> QueuedJob | None:
        """The job's state in the latest snapshot (None if Slurm does not list it).

        A snapshot older than ``submitted_at`` cannot know the job, so one is taken now.
        """
        with self._lock:
            now = self._clock()
            stale = self._taken is None or now - self._taken >= self.interval
            if submitted_at is not None and self._taken is not None and self._taken < submitted_at:
                stale = True
            if stale:
                self._refresh(now)
            return self._jobs.get(job_id)

    def forget_snapshot(self) -> None:
        """Make the next call query (after scancel, whose effect should show at once)."""
        with self._lock:
            self._taken = None

    def _refresh(self, now: float) -> None:
        self.queries += 1
        proc = self._run(["squeue", "-h", "-t", "all", "-o", "%i|%T|%r"])
        jobs: dict[str, QueuedJob] = {}
        for line in proc.stdout.splitlines():
            parts = line.strip().split("|")
            if len(parts) != 3:
                continue
            job_id = parts[0].split("+")[0]  # a heterogeneous job lists 12+0, 12+1: the leader speaks
            jobs.setdefault(job_id, QueuedJob(parts[1].upper(), parts[2]))
        changed = jobs != self._jobs
        self._jobs = jobs
        self._taken = self._clock()
        self.interval = BASE_SECONDS if changed else min(MAX_SECONDS, self.interval * BACKOFF)


_QUEUES: dict[str, SlurmQueue] = {}
_QUEUES_LOCK = threading.Lock()


def queue_for(key: str, run: Runner) -> SlurmQueue:
    """The process-wide queue of a cluster (keyed by its slurm.conf), shared across experiments."""
    with _QUEUES_LOCK:
        if key not in _QUEUES:
            _QUEUES[key] = SlurmQueue(run)
        return _QUEUES[key]
