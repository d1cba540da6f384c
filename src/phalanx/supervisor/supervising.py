"""The supervision loop: one experiment from its first group started to its recorded outcome."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from phalanx.backends.base import DryRun, JobStatus, ReplicaStatus
from phalanx.config import Settings
from phalanx.domain import ExperimentStatus, Framework, Replica, ReplicaState
from phalanx.plan import Plan
from phalanx.spec.model import ExperimentSpec
from phalanx.supervisor.preparing import Prepared, ingester_here, prepare

if TYPE_CHECKING:
    from phalanx.store.base import Store

log = logging.getLogger(__name__)

POLL_SECONDS = 0.1
# Once a TensorFlow chief has succeeded, the other replicas get this long to end by themselves
# (MultiWorkerMirroredStrategy workers do, and flush what they report) before the servers that
# never end (ParameterServerStrategy's tf.distribute.Server.join()) are stopped.
TF_SERVER_GRACE_SECONDS = 5.0
TAIL_LINES = 10  # log lines quoted in a failed experiment's reason
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


class LoggingObserver:
    """The default observer: Python logging (for API users without a terminal)."""

    def line(self, replica: str, text: str) -> None:
        log.info("[%s] %s", replica, text)

    def states(self, replicas: Mapping[str, ReplicaState], elapsed: float) -> None:
        return None

    def message(self, text: str) -> None:
        log.info("%s", text)


def launch(
    spec_or_plan: ExperimentSpec | Plan,
    *,
    settings: Settings | None = None,
    store: Store | None = None,
    observer: Observer | None = None,
    handle_signals: bool = True,
    **options: Any,
) -> Outcome:
    """Run an experiment to its end and return how it ended (options as for ``prepare``)."""
    settings = settings or Settings()
    prepared = prepare(spec_or_plan, settings=settings, **options)
    opener: Store | Callable[[], Store]
    if store is None:
        from phalanx.store import open_store

        def opener() -> Store:
            return open_store(settings)

    else:
        opener = store
    return Supervisor(prepared, opener, settings, observer, handle_signals=handle_signals).run()


# ---- supervising ------------------------------------------------------------------------------


class _Tail:
    """One thread per replica: its log lines -> spool LOG events, the observer, a short tail."""

    def __init__(self, lines: Iterator[str], replica: Replica, sink: Callable[[Replica, str], None]) -> None:
        self.last: deque[str] = deque(maxlen=TAIL_LINES)
        self._lines = lines
        self._replica = replica
        self._sink = sink
        self.thread = threading.Thread(target=self._run, name=f"tail-{replica.name}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            for text in self._lines:
                self.last.append(text)
                self._sink(self._replica, text)
        except Exception:  # a log reader's trouble must not take the supervisor down
            log.exception("reading the log of %s failed", self._replica.name)


class Supervisor:
    def __init__(
        self,
        prepared: Prepared,
        store: Store | Callable[[], Store],
        settings: Settings,
        observer: Observer | None = None,
        *,
        handle_signals: bool = True,
    ) -> None:
        """``store``: the store, or a function that opens it (called once the replicas have started)."""
        self.p = prepared
        self._store_factory = store
        self.store: Store = None  # type: ignore[assignment]  # set by run()
        self.settings = settings
        self.observer: Observer = observer or LoggingObserver()
        self.handle_signals = handle_signals
        self.id = prepared.experiment_id
        self.run_dir = settings.runs_dir / self.id
        self.spool_dir = settings.spool_dir / self.id
        self.replicas = {
            r.name: Replica(
                experiment_id=self.id,
                name=r.name,
                role=r.role,
                index=r.index,
                rank=r.rank,
                resources=r.resources.to_json(),
            )
            for r in prepared.plan.replicas
        }
        self.states: dict[str, ReplicaStatus] = {}
        self.stop_reason: str | None = None
        self.tails: dict[str, _Tail] = {}
        self.started = time.monotonic()
        self.submitted_at: float | None = None  # wall clock of the first submit: the experiment's start
        self._spool: Any = None

    # -- signals and stop requests --------------------------------------------------------------
    def _on_signal(self, signum: int, _frame: object) -> None:
        if self.stop_reason is None:
            self.stop_reason = f"stopped by {signal.Signals(signum).name}"

    def _stop_requested(self) -> bool:
        if self.stop_reason is None and (self.run_dir / "stop").exists():
            self.stop_reason = "stopped on request"
        return self.stop_reason is not None

    # -- the run --------------------------------------------------------------------------------
    def run(self) -> Outcome:
        """Start the replicas, supervise them to the end, record the outcome; returns it.

        The first group is started before the store is opened: importing SQLAlchemy and checking
        the schema then overlaps with the replicas' own start-up (importing torch) instead of
        delaying it. Should the store fail, the replicas are stopped before the error propagates.
        """
        from phalanx.tracking.spool import SpoolWriter

        self.run_dir.mkdir(parents=True, exist_ok=True)
        # a stop file here already is a request made before we started (Run.cancel right after
        # submit): ids are never reused, so it is honoured, not cleared
        (self.run_dir / "supervisor.pid").write_text(f"{os.getpid()}\n")
        self._spool = SpoolWriter(self.spool_dir, experiment_id=self.id, stream=f"console-{self.id}")
        previous = self._install_signals()
        stop_ingest = threading.Event()
        ingest_thread: threading.Thread | None = None
        created = False
        outcome = Outcome(self.id, ExperimentStatus.FAILED, "the supervisor did not finish")
        try:
            self.p = ingester_here(self.p)
            self.submitted_at = time.time()  # the store is opened after the submit (see above)
            handle = None if self._stop_requested() else self._submit(self.p.dry_run)
            try:
                self.store = self._store_factory() if callable(self._store_factory) else self._store_factory
                self._create()
            except BaseException:
                if handle is not None:
                    self.p.backend.cancel(handle)
                    self._join_tails()
                raise
            created = True
            ingest_thread = self._start_ingester(stop_ingest)
            outcome = self._attempts(handle)
        except BaseException as exc:
            outcome = Outcome(self.id, ExperimentStatus.FAILED, f"the supervisor failed: {exc}")
            raise
        finally:
            self._restore_signals(previous)
            self._spool.close()
            stop_ingest.set()
            if ingest_thread is not None:
                ingest_thread.join(timeout=120)
            if created:
                self._finish(outcome)
            with contextlib.suppress(FileNotFoundError):
                (self.run_dir / "supervisor.pid").unlink()
        return outcome

    def _create(self) -> None:
        plan = self.p.plan
        self.store.create_experiment(
            experiment_id=self.id,
            name=plan.name,
            project=plan.project,
            replicas=list(self.replicas.values()),
            framework=str(plan.framework) if plan.framework else None,
            backend=self.p.backend.name,
            cluster=self.p.cluster,
            tags=plan.tags,
            topology=plan.topology(),
            spec_text=plan.source_text,
            plan=plan.to_json(),
            status=ExperimentStatus.STARTING,
        )

    def _submit(self, dry: DryRun) -> str:
        """Start a group and the threads that tail its replicas' logs."""
        handle = self.p.backend.submit(dry)
        self.tails = {
            name: _Tail(self.p.backend.logs(handle, name, follow=True), replica, self._line)
            for name, replica in self.replicas.items()
        }
        return handle

    def _join_tails(self) -> None:
        for tail in self.tails.values():
            tail.thread.join(timeout=30)

    def _start_ingester(self, stop: threading.Event) -> threading.Thread | None:
        try:
            from phalanx.ingest import Ingester
        except ImportError:  # pragma: no cover - ingest ships with Phalanx
            return None
        ingester = Ingester(self.store, None, self.spool_dir)  # type: ignore[arg-type]
        thread = threading.Thread(target=ingester.run, args=(stop,), name="ingest", daemon=True)
        thread.start()
        return thread

    def _install_signals(self) -> dict[int, Any]:
        previous: dict[int, Any] = {}
        if self.handle_signals and threading.current_thread() is threading.main_thread():
            # SIGHUP too: a closed terminal stops the experiment cleanly instead of orphaning its row
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                previous[sig] = signal.signal(sig, self._on_signal)
        return previous

    @staticmethod
    def _restore_signals(previous: Mapping[int, Any]) -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    def _attempts(self, handle: str | None) -> Outcome:
        plan = self.p.plan
        # an engine that restarts failed replicas itself (the Kubeflow operator, from backoffLimit)
        # must not be restarted a second time by us
        max_restarts = 0 if getattr(self.p.backend, "restarts_itself", False) else plan.max_restarts
        restarts = 0
        while True:
            status, reason = self._attempt(handle, first=restarts == 0)
            if status is ExperimentStatus.FAILED and restarts < max_restarts and not self._stop_requested():
                restarts += 1
                self.observer.message(f"{reason}; restarting the group ({restarts}/{max_restarts})")
                self._emit_all(f"phalanx: restarting the group ({restarts}/{max_restarts}) after: {reason}")
                # a fresh dry run: new ports for the new group
                handle = self._submit(self.p.backend.dry_run(plan, self.p.context))
                continue
            return Outcome(self.id, status, reason, restarts)

    def _attempt(self, handle: str | None, first: bool) -> tuple[ExperimentStatus, str | None]:
        backend = self.p.backend
        if handle is None:
            return ExperimentStatus.STOPPED, self.stop_reason
        self.store.update_experiment(
            self.id,
            status=ExperimentStatus.RUNNING,
            handle=handle,
            started_at=(self.submitted_at or time.time()) if first else None,
        )
        self.states = {}
        try:
            return self._watch(handle)
        finally:
            backend.cancel(handle)  # idempotent; leaves nothing of this attempt behind
            self._join_tails()
            final = backend.describe(handle)
            if final is not None:
                self._record(final)

    def _watch(self, handle: str) -> tuple[ExperimentStatus, str | None]:
        backend = self.p.backend
        plan = self.p.plan
        # max_run_seconds counts from the moment the job runs: time waiting in a cluster's queue is not
        # the experiment's (a job pending behind another must not fail for it)
        deadline: float | None = None
        pending_reason: str | None = None
        chief_done_at: float | None = None
        while True:
            if self._stop_requested():
                backend.cancel(handle)
                return ExperimentStatus.STOPPED, self.stop_reason
            job = backend.describe(handle)
            if job is None:
                return ExperimentStatus.FAILED, f"the {backend.name} engine no longer knows the job {handle}"
            if job.status is ExperimentStatus.PENDING:
                if pending_reason != (job.reason or ""):
                    pending_reason = job.reason or ""
                    self.store.update_experiment(
                        self.id, status=ExperimentStatus.PENDING, reason=pending_reason
                    )
                    self.observer.message(f"pending ({pending_reason or 'queued'})")
            else:
                if pending_reason is not None:
                    pending_reason = None
                    self.store.update_experiment(self.id, status=ExperimentStatus.RUNNING, reason="")
                if deadline is None and plan.max_run_seconds:
                    deadline = time.monotonic() + plan.max_run_seconds
            self._record(job)
            if self._chief_done(job):
                # the chief decides a TensorFlow experiment: what the others do now cannot fail it
                chief_done_at = chief_done_at or time.monotonic()
                others_done = all(r.state.done for r in job.replicas if r.name != "master")
                if others_done or time.monotonic() - chief_done_at > TF_SERVER_GRACE_SECONDS:
                    if not others_done:
                        self._emit_all("phalanx: the chief succeeded; stopping the TensorFlow servers")
                    backend.cancel(handle)
                    return ExperimentStatus.SUCCEEDED, None
                time.sleep(POLL_SECONDS)
                continue
            failed = [r for r in job.replicas if r.state is ReplicaState.FAILED]
            if failed or job.status is ExperimentStatus.FAILED:
                culprit = min(failed, key=lambda r: r.finished_at or float("inf")) if failed else None
                backend.cancel(handle)  # fail fast: the siblings of a failed replica are stopped
                return ExperimentStatus.FAILED, self._failure_reason(culprit, job)
            if job.status is ExperimentStatus.SUCCEEDED:
                return ExperimentStatus.SUCCEEDED, None
            if job.status is ExperimentStatus.STOPPED:
                return ExperimentStatus.STOPPED, job.reason or "stopped by the engine"
            if deadline is not None and time.monotonic() > deadline:
                backend.cancel(handle)
                return (
                    ExperimentStatus.FAILED,
                    f"ran longer than max_run_seconds ({plan.max_run_seconds:g} s)",
                )
            time.sleep(POLL_SECONDS)

    def _chief_done(self, job: JobStatus) -> bool:
        """TensorFlow's ps (and PS-strategy worker) servers never exit: the chief's success ends it."""
        if self.p.plan.framework is not Framework.TENSORFLOW:
            return False
        return any(r.name == "master" and r.state is ReplicaState.SUCCEEDED for r in job.replicas)

    def _failure_reason(self, culprit: ReplicaStatus | None, job: JobStatus) -> str:
        if culprit is None:
            return job.reason or "the engine reported the job failed"
        what = culprit.reason or (
            f"exited with code {culprit.exit_code}" if culprit.exit_code is not None else "failed"
        )
        reason = f"{culprit.name} {what}"
        tail = self.tails.get(culprit.name)
        if tail is not None:
            tail.thread.join(timeout=5)  # let its last lines arrive
            lines = [line for line in tail.last if line.strip()]
            if lines:
                reason += "; last lines of its log:\n" + "\n".join(f"  {line}" for line in lines)
        return reason

    # -- recording --------------------------------------------------------------------------------
    def _record(self, job: JobStatus) -> None:
        """Write replica rows whose state changed (the supervisor is their only writer)."""
        changed = False
        for r in job.replicas:
            old = self.states.get(r.name)
            if old == r:
                continue
            self.states[r.name] = r
            if r.name not in self.replicas:
                continue
            changed = True
            now = time.time()
            started = old is None and r.state is not ReplicaState.PENDING
            self.store.update_replica(
                self.id,
                r.name,
                state=r.state,
                host=r.host,
                pid=r.pid,
                exit_code=r.exit_code,
                reason=r.reason,
                started_at=now if started else None,
                finished_at=(r.finished_at or now) if r.state.done else None,
            )
        if changed:
            elapsed = time.monotonic() - self.started
            self.observer.states({n: s.state for n, s in self.states.items()}, elapsed)

    def _line(self, replica: Replica, text: str) -> None:
        self.observer.line(replica.name, text)
        with contextlib.suppress(ValueError):  # the writer closed under a late line at shutdown
            self._spool.log(
                text, replica=replica.name, role=str(replica.role), index=replica.index, rank=replica.rank
            )

    def _emit_all(self, text: str) -> None:
        """A supervisor note in the console of every replica (restarts, servers stopped)."""
        for replica in self.replicas.values():
            self._line(replica, text)

    def _finish(self, outcome: Outcome) -> None:
        now = time.time()
        for name, r in self.replicas.items():
            st = self.states.get(name)
            if st is None or not st.state.done:
                # never started, or its engine lost it: it did not finish on its own
                state = (
                    ReplicaState.STOPPED
                    if outcome.status is not ExperimentStatus.SUCCEEDED
                    else ReplicaState.SUCCEEDED
                )
                self.store.update_replica(self.id, r.name, state=state, finished_at=now)
        self.store.update_experiment(self.id, status=outcome.status, reason=outcome.reason, finished_at=now)
        self.observer.states({n: s.state for n, s in self.states.items()}, time.monotonic() - self.started)
