"""A scripted in-process engine and a virtual clock: the supervisor's rules in milliseconds.

``ScriptedBackend`` follows the ``Backend`` protocol with no process at all: each attempt (each
``submit``) plays a script saying, per replica, when it ends (in virtual seconds after the submit)
and with which exit code, and what it prints. ``VirtualClock`` stands in for the ``time`` module of
the supervisor's loop, its clock and its recorder: its ``sleep`` only moves the clock, so a rule
that waits minutes (``max_run_seconds``, the TensorFlow servers' grace) is checked at once. The
real-process tests of tests/integration/local stay: these check the rules, those check the engines.

    scripts = [{"worker-0": Ends(0.3, exit_code=3)}]            # attempt 1; then every replica succeeds
    outcome, engine = supervise(spec, scripts, store, settings)
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar
from unittest import mock

from phalanx.backends.base import DryRun, JobStatus, LaunchContext, ReplicaStatus, expect_dry_run
from phalanx.config import Settings
from phalanx.domain import ExperimentStatus, ReplicaState
from phalanx.plan import Plan
from phalanx.spec.model import ExperimentSpec
from phalanx.store.base import Store
from phalanx.supervisor import clock as run_clock
from phalanx.supervisor import recording, supervising
from phalanx.supervisor.opener import LazyStore
from phalanx.supervisor.outcome import Outcome
from phalanx.supervisor.preparing import prepare
from phalanx.supervisor.supervising import Supervisor


class VirtualClock:
    """``time.monotonic``, ``time.time``, ``time.time_ns`` and ``time.sleep`` on a clock that moves
    only when slept.
    Past ``limit`` virtual seconds it raises, so a supervisor that would never end fails its test
    at once instead of spinning until pytest's timeout."""

    def __init__(self, start: float = 1_700_000_000.0, limit: float = 24 * 3600.0) -> None:
        self.start = self.now = start
        self.limit = limit

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now

    def time_ns(self) -> int:
        return int(self.now * 1e9)

    def sleep(self, seconds: float) -> None:
        self.now += max(seconds, 0.0)
        if self.now - self.start > self.limit:
            raise TimeoutError(f"the supervisor was still running after {self.limit:g} virtual seconds")


@dataclass(frozen=True)
class Ends:
    """A replica that ends ``at`` virtual seconds after its submit with ``exit_code`` (None: it runs
    until cancelled, as a TensorFlow parameter server does), printing ``lines`` first."""

    at: float | None = 0.1
    exit_code: int = 0
    lines: tuple[str, ...] = ()


RUNS_FOREVER = Ends(at=None)


@dataclass(frozen=True)
class ScriptedDryRun(DryRun):
    """The scripted engine's request: the replica names of the plan."""

    replicas: tuple[str, ...]
    format: ClassVar[str] = "json"

    @property
    def native(self) -> dict[str, Any]:
        return {"engine": "scripted", "replicas": list(self.replicas)}


@dataclass
class _Job:
    script: Mapping[str, Ends]
    submitted: float
    replicas: tuple[str, ...]
    cancelled_at: float | None = None
    pending: float = 0.0  # virtual seconds it waits in the engine's queue before it runs

    @property
    def started(self) -> float:
        return self.submitted + self.pending


@dataclass
class ScriptedBackend:
    """An in-process engine playing ``scripts[n]`` on its n-th submit (replicas a script does not
    name succeed after 0.1 s; past the last script, every replica succeeds). ``pending[n]``: how
    long the n-th submit stays PENDING (a cluster's queue) before it runs; replicas' times count
    from then. Records what the supervisor asked of it: ``dry_runs``, ``submits``, ``cancels``
    (handle, virtual time)."""

    clock: VirtualClock
    scripts: Sequence[Mapping[str, Ends]] = ()
    pending: Sequence[float] = ()
    restarts_itself: bool = False
    name: str = "scripted"
    dry_runs: int = 0
    cancels: list[tuple[str, float]] = field(default_factory=list)
    jobs: dict[str, _Job] = field(default_factory=dict)

    @property
    def submits(self) -> int:
        return len(self.jobs)

    def dry_run(self, plan: Plan, context: LaunchContext) -> ScriptedDryRun:
        self.dry_runs += 1
        names = tuple(r.name for r in plan.replicas)
        return ScriptedDryRun(backend=self.name, plan=plan, context=context, replicas=names)

    def submit(self, dry_run: DryRun) -> str:
        dry = expect_dry_run(dry_run, ScriptedDryRun, self.name)
        attempt = len(self.jobs)
        script = self.scripts[attempt] if attempt < len(self.scripts) else {}
        handle = f"{dry.context.experiment_id}:{attempt}"
        waits = self.pending[attempt] if attempt < len(self.pending) else 0.0
        self.jobs[handle] = _Job(script, self.clock.now, dry.replicas, pending=waits)
        return handle

    def _end(self, job: _Job, name: str) -> Ends:
        return job.script.get(name, Ends())

    def _replica(self, job: _Job, name: str) -> ReplicaStatus:
        end = self._end(job, name)
        now = self.clock.now
        ends_at = None if end.at is None else job.started + end.at
        if (
            ends_at is not None
            and ends_at <= now
            and (job.cancelled_at is None or ends_at <= job.cancelled_at)
        ):
            state = ReplicaState.SUCCEEDED if end.exit_code == 0 else ReplicaState.FAILED
            reason = None if end.exit_code == 0 else f"exited with code {end.exit_code}"
            return ReplicaStatus(name, state, "here", end.exit_code, reason, 1000, ends_at)
        if job.cancelled_at is not None:
            return ReplicaStatus(name, ReplicaState.STOPPED, "here", -15, "stopped", 1000, job.cancelled_at)
        return ReplicaStatus(name, ReplicaState.RUNNING, "here", pid=1000)

    def describe(self, handle: str) -> JobStatus | None:
        job = self.jobs.get(handle)
        if job is None:
            return None
        if self.clock.now < job.started and job.cancelled_at is None:
            waiting = tuple(ReplicaStatus(n, ReplicaState.PENDING) for n in job.replicas)
            return JobStatus(ExperimentStatus.PENDING, waiting, "queued")
        replicas = tuple(self._replica(job, n) for n in job.replicas)
        failed = sorted(
            (r for r in replicas if r.state is ReplicaState.FAILED), key=lambda r: r.finished_at or 0
        )
        if failed:
            return JobStatus(ExperimentStatus.FAILED, replicas, f"{failed[0].name} {failed[0].reason}")
        if all(r.state is ReplicaState.SUCCEEDED for r in replicas):
            return JobStatus(ExperimentStatus.SUCCEEDED, replicas)
        if all(r.state.done for r in replicas):
            return JobStatus(ExperimentStatus.STOPPED, replicas, "stopped")
        return JobStatus(ExperimentStatus.RUNNING, replicas)

    def logs(self, handle: str, replica: str, follow: bool = False) -> Iterator[str]:
        job = self.jobs.get(handle)
        if job is not None:
            yield from self._end(job, replica).lines

    def discard_logs(self, handle: str) -> None:
        """The scripted jobs' lines live in memory only: nothing to remove."""

    def refuse_if_it_can_never_run(self, dry_run: DryRun) -> None:
        """Every script can run."""

    def cancel(self, handle: str) -> None:
        job = self.jobs.get(handle)
        self.cancels.append((handle, self.clock.now))
        if job is not None and job.cancelled_at is None:
            job.cancelled_at = self.clock.now


@contextlib.contextmanager
def virtual_time(clock: VirtualClock) -> Iterator[VirtualClock]:
    """The supervisor's loop on ``clock`` (only the supervisor's modules' ``time``: threads keep
    real time)."""
    with contextlib.ExitStack() as stack:
        for module in (supervising, recording, run_clock):
            stack.enter_context(mock.patch.object(module, "time", clock))
        yield clock


def supervise(
    spec: ExperimentSpec,
    scripts: Sequence[Mapping[str, Ends]],
    store: Store,
    settings: Settings,
    *,
    restarts_itself: bool = False,
    before_run: Any = None,
    pending: Sequence[float] = (),
) -> tuple[Outcome, ScriptedBackend]:
    """Run ``spec`` under the real Supervisor on a ScriptedBackend, in virtual time; returns how it
    ended and the engine (what was submitted and cancelled, when). ``before_run(prepared)`` runs
    after preparing, before supervising (to leave a stop request, say)."""
    clock = VirtualClock(limit=3 * 3600.0)
    engine = ScriptedBackend(clock, scripts, pending, restarts_itself=restarts_itself)
    prepared = prepare(spec, settings=settings, backend=engine, workdir=settings.home)
    if before_run is not None:
        before_run(prepared)
    with virtual_time(clock):
        outcome = Supervisor(prepared, LazyStore(store), settings, handle_signals=False).run()
    return outcome, engine


def replica_rows(store: Store, experiment_id: str) -> dict[str, tuple[str, int | None]]:
    """name -> (state, exit code) as the store holds them."""
    return {r.name: (r.state.value, r.exit_code) for r in store.list_replicas(experiment_id)}


def dump(engine: ScriptedBackend) -> str:
    """What the engine saw, for an assertion message."""
    return json.dumps({"submits": engine.submits, "cancels": engine.cancels, "dry_runs": engine.dry_runs})
