"""The supervision loop: one experiment from its first group started to its recorded outcome."""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from phalanx.backends.base import DryRun, JobStatus, ReplicaStatus
from phalanx.backends.local.boxes import SECRET_NAMES
from phalanx.config import Settings
from phalanx.domain import ExperimentStatus, Framework, Replica, ReplicaState
from phalanx.plan import Plan
from phalanx.spec.model import ExperimentSpec
from phalanx.supervisor import admitting, attempts, recording
from phalanx.supervisor.admitting import _requested_reason
from phalanx.supervisor.liveness import StallNotices, watchdog
from phalanx.supervisor.outcome import (
    PID_FILE,
    LoggingObserver,
    Observer,
    Outcome,
    _Shielded,
)
from phalanx.supervisor.preparing import Prepared, ingester_here, launch_json, prepare
from phalanx.supervisor.tails import LogTail, join_tails

if TYPE_CHECKING:
    from phalanx.store.base import IngestStore

log = logging.getLogger(__name__)


POLL_SECONDS = 0.1
# Once a TensorFlow chief has succeeded, the other replicas get this long to end by themselves
# (MultiWorkerMirroredStrategy workers do, and flush what they report) before the servers that
# never end (ParameterServerStrategy's tf.distribute.Server.join()) are stopped.
TF_SERVER_GRACE_SECONDS = 5.0


def launch(
    spec_or_plan: ExperimentSpec | Plan,
    *,
    settings: Settings | None = None,
    store: IngestStore | None = None,
    observer: Observer | None = None,
    handle_signals: bool = True,
    priority: int = 0,
    wait: bool = True,
    **options: Any,
) -> Outcome:
    """Run an experiment to its end and return how it ended (options as for ``prepare``; ``priority``
    and ``wait`` as for Supervisor)."""
    settings = settings or Settings()
    prepared = prepare(spec_or_plan, settings=settings, **options)
    opener: IngestStore | Callable[[], IngestStore]
    if store is None:
        from phalanx.store import open_store

        def opener() -> IngestStore:
            return open_store(settings)

    else:
        opener = store
    return Supervisor(
        prepared, opener, settings, observer, handle_signals=handle_signals, priority=priority, wait=wait
    ).run()


def record_building(
    prepared: Prepared, store: IngestStore, settings: Settings, *, accepted: bool = False
) -> None:
    """Record the experiment, status building, before its environment is built (minutes): it has
    its id and shows in `phalanx ls` meanwhile. ``prepared``: its dry run (nothing built yet); the
    Supervisor that runs it afterwards is told it exists (``exists=True``). ``accepted``: the
    server recorded it at submit (status created): that row says building now."""
    supervisor = Supervisor(prepared, store, settings, handle_signals=False)
    supervisor._open_store()
    if accepted:
        store.update_experiment(
            prepared.experiment_id, status=ExperimentStatus.BUILDING, plan=supervisor._plan_doc()
        )
    else:
        supervisor._create(ExperimentStatus.BUILDING)


# ---- supervising ------------------------------------------------------------------------------


class Supervisor:
    def __init__(
        self,
        prepared: Prepared,
        store: IngestStore | Callable[[], IngestStore],
        settings: Settings,
        observer: Observer | None = None,
        *,
        handle_signals: bool = True,
        priority: int = 0,
        wait: bool = True,
        resume: bool = False,
        exists: bool = False,
        params_section: str | None = None,
        notify: str | None = None,
    ) -> None:
        """``store``: the store, or a function that opens it (called once the replicas have started).
        ``notify``: a FIFO that gets one byte once the outcome is recorded (a group's controller
        waits on it: it notices a trial's end at once instead of at its next poll).
        ``params_section``: record the launch params as the experiment's params in this section
        (a group trial's sampled values: `phalanx params`, the run table, compare).
        ``exists``: its row was recorded already (``record_building``: status building while its
        environment was built), so it is updated, not created.
        ``priority``: its place in this machine's queue (higher first); ``wait``: False refuses
        (UsageError) instead of queueing when the topology does not fit now (local engine only).
        ``resume``: continue an existing failed or stopped experiment (`phalanx resume`) as a new
        attempt, from its latest checkpoint, instead of creating one."""
        self.p = prepared
        self._store_factory = store
        self.notify = notify
        self.store: IngestStore = None  # type: ignore[assignment]  # set by run()
        self.settings = settings
        self.observer: Observer = _Shielded(observer or LoggingObserver())
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
        self.tails: dict[str, LogTail] = {}
        self.lost_lines = 0  # console lines that could not be spooled (said in the outcome)
        self.started = time.monotonic()
        self._ran_seconds = 0.0  # time the replicas of finished attempts ran (max_run_seconds)
        self._running_since: float | None = None  # the current attempt runs (not pending) since
        self.submitted_at: float | None = None  # wall clock of the first submit: the experiment's start
        self._spool: Any = None
        self._store_warned = float("-inf")
        self.liveness = watchdog(
            prepared.plan.stall,
            StallNotices(self.id, lambda: self.store, self.observer.message),
            lambda name: list(self.tails[name].last) if name in self.tails else [],
        )
        self.priority = priority
        self.wait = wait
        self._admission: Any = None  # phalanx.queue.Admission while the ledger holds us
        self._created = exists
        self._existed = exists
        self.params_section = params_section
        self._system: Any = None  # phalanx.machine.sysmetrics.SystemMetrics while replicas run here
        self._handle: str | None = None
        self.resume = resume
        self._resume_step: int | None = None  # the checkpoint step the next group continues from
        self._attempt_no: int | None = None  # the store's number of the attempt running now
        self._repro_thread: threading.Thread | None = None
        self._store_ready = threading.Event()

    # -- methods kept in modules of their own (one job each) ----------------------------------------
    _admit = admitting._admit
    _after_admission = admitting._after_admission
    _reopen = attempts._reopen
    _start_resumed = attempts._start_resumed
    _start_repro = attempts._start_repro
    _attempts = attempts._attempts
    _add_attempt = attempts._add_attempt
    _follow_requeue = attempts._follow_requeue
    _finish_attempt = attempts._finish_attempt
    _resume_context = attempts._resume_context
    _with_attempt = attempts._with_attempt
    _local_checkpoint = attempts._local_checkpoint
    _record = recording._record
    _record_rows = recording._record_rows
    _line = recording._line
    _show = recording._show
    _spool_lines = recording._spool_lines
    _flush_tails = recording._flush_tails
    _record_launch_params = recording._record_launch_params
    _emit_all = recording._emit_all
    _tidy = recording._tidy
    _finish = recording._finish
    _outcome_to_spool = recording._outcome_to_spool
    _write_outcome = recording._write_outcome

    # -- signals and stop requests --------------------------------------------------------------
    def _on_signal(self, signum: int, _frame: object) -> None:
        if self.stop_reason is None:  # a reason left with the request (a group's pruning) wins
            requested = _requested_reason(self.run_dir / "stop")
            self.stop_reason = requested or f"stopped by {signal.Signals(signum).name}"

    def _stop_requested(self) -> bool:
        if self.stop_reason is None and (self.run_dir / "stop").exists():
            self.stop_reason = _requested_reason(self.run_dir / "stop") or "stopped on request"
        return self.stop_reason is not None

    # -- the run --------------------------------------------------------------------------------
    def run(self) -> Outcome:
        """Start the replicas, supervise them to the end, record the outcome; returns it.

        The first group is started before the store is opened: importing SQLAlchemy and checking
        the schema then overlaps with the replicas' own start-up (importing torch) instead of
        delaying it. Should the store fail, the replicas are stopped before the error propagates.
        """
        from phalanx.machine.procs import record_process, recorded_process
        from phalanx.spool import SpoolWriter

        self.run_dir.mkdir(parents=True, exist_ok=True)
        # a stop file here already is a request made before we started (Run.cancel right after
        # submit): ids are never reused, so it is honoured, not cleared
        if not self.resume:  # a resume records itself once it has won the reopen (_reopen)
            record_process(self.run_dir / PID_FILE)  # "pid start-time host": what a stop trusts
        # a stream of its own per supervisor process: once ingested it is removed (_tidy), and a later
        # supervisor of the same experiment (a resume) must not reopen a stream the store has seen
        stream = f"console-{self.id}-{os.getpid()}-{secrets.token_hex(4)}"
        self._spool = SpoolWriter(self.spool_dir, experiment_id=self.id, stream=stream)
        previous = self._install_signals()
        stop_ingest = threading.Event()
        ingest_thread: threading.Thread | None = None
        created = False
        outcome = Outcome(self.id, ExperimentStatus.FAILED, "the supervisor did not finish")
        try:
            self.p = ingester_here(self.p)
            if self.resume:
                self._reopen()
            if not self._stop_requested():
                self._admit()  # may wait in the queue, the experiment recorded as queued
            created = self._created
            self.submitted_at = time.time()  # the store is opened after the submit (see above)
            if self.resume:
                handle = self._start_resumed()
            else:
                self._start_repro()
                handle = None if self._stop_requested() else self._submit(self.p.dry_run)
                self._start_system_metrics()  # before the store opens: the replicas are starting now
                try:
                    self._open_store()
                    if not self._created:
                        self._create()
                    elif handle is not None:  # recorded before (building, or by the server at submit)
                        self.store.update_experiment(
                            self.id, status=ExperimentStatus.STARTING, plan=self._plan_doc()
                        )
                    self._after_admission()
                except BaseException:
                    if handle is not None:
                        self.p.backend.cancel(handle)
                        self._join_tails()
                    raise
                self._store_ready.set()
            # announced once the engine has taken it: a submit that fails names no experiment
            self.observer.message(
                f"experiment {self.id} ({len(self.replicas)} replicas, {self.p.backend.name})"
            )
            created = True
            self._record_launch_params()
            ingest_thread = self._start_ingester(stop_ingest)
            outcome = self._attempts(handle)
        except BaseException as exc:
            outcome = Outcome(self.id, ExperimentStatus.FAILED, f"the supervisor failed: {exc}")
            raise
        finally:
            self._restore_signals(previous)
            if self._system is not None:
                self._system.stop()
            self._spool.close()
            stop_ingest.set()
            if ingest_thread is not None:
                ingest_thread.join(timeout=120)
            if self._repro_thread is not None:
                self._store_ready.set()  # (also when the store never opened: the thread then ends)
                self._repro_thread.join(timeout=120)
            if self.lost_lines:  # never silently: the user must know the console is incomplete
                note = f"{self.lost_lines} console line(s) could not be stored"
                outcome = replace(outcome, reason=f"{outcome.reason}; {note}" if outcome.reason else note)
                self.observer.message(note)
            if created or self._created:
                self._finish(outcome)
                self._tidy(ingested=ingest_thread is not None and not ingest_thread.is_alive())
            if self._admission is not None:  # after the replicas are gone: their cores are free
                self._admission.release()
            if recorded_process(self.run_dir / PID_FILE) == os.getpid():  # a resume that lost
                (self.run_dir / PID_FILE).unlink(missing_ok=True)  # leaves the winner's record
        return outcome

    def _open_store(self) -> None:
        if self.store is None:
            self.store = self._store_factory() if callable(self._store_factory) else self._store_factory

    def _quotas(self) -> Any:
        """Every project's quota on this machine, from the store (read again while it waits)."""
        from phalanx import queue

        self._open_store()
        return queue.local_limits(self.store)

    @contextlib.contextmanager
    def _secrets_handed(self) -> Iterator[None]:
        """The project's secrets (``phalanx secret set``), on this machine only, while the engine
        starts the replicas: they join this process's environment, which the local engine passes on
        to its replicas without writing it anywhere (not the unit files, the dry run or the store),
        and leave it again at once (the supervisor may run inside a caller's own process).
        Cluster engines write their job's environment into scripts and objects, so they get none."""
        if self.p.backend.name != "local":
            yield
            return
        from phalanx.store import secrets

        self._open_store()
        handed = secrets.environment(self.store, self.settings.home, self.p.plan.project)
        if self.p.context.isolation is not None:  # a box inherits nothing but these, by name
            handed[SECRET_NAMES] = ",".join(sorted(handed))
        before = {name: os.environ.get(name) for name in handed}
        os.environ.update(handed)
        try:
            yield
        finally:
            for name, value in before.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value

    def _create(self, status: ExperimentStatus = ExperimentStatus.STARTING) -> None:
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
            plan=self._plan_doc(),
            status=status,
            created_at=self.submitted_at,  # recorded after the submit, created before it started
        )

    def _plan_doc(self) -> dict[str, Any]:
        """The plan as the experiment's row keeps it, with how it was launched."""
        return {**self.p.plan.to_json(), "launch": launch_json(self.p)}

    def _submit(self, dry: DryRun) -> str:
        """Start a group and the threads that tail its replicas' logs."""
        with self._secrets_handed():
            handle = self.p.backend.submit(dry)
        self._handle = handle  # the group the system-metrics sampler looks at
        self.tails = {
            name: LogTail(
                self.p.backend.logs(handle, name, follow=True), replica, self._show, self._spool_lines
            )
            for name, replica in self.replicas.items()
        }
        return handle

    def _join_tails(self) -> None:
        join_tails(self.tails.values())

    def _start_ingester(self, stop: threading.Event) -> threading.Thread | None:
        try:
            from phalanx.ingest import Ingester
        except ImportError:  # pragma: no cover - ingest ships with Phalanx
            return None
        ingester = Ingester(self.store, None, self.spool_dir)
        thread = threading.Thread(target=ingester.run, args=(stop,), name="ingest", daemon=True)
        thread.start()
        return thread

    def _start_system_metrics(self) -> None:
        """Sample each local replica's process tree into ``system/...`` series (off with
        PHALANX_SYSTEM_METRICS=off or `phalanx run --no-system-metrics`). Only for replicas whose
        leader runs on this machine: elsewhere the engine starts ``python -m phalanx.machine.sysmetrics``."""
        from phalanx.machine import sysmetrics

        interval = sysmetrics.interval_from_env()
        if interval is None or self.p.backend.name != "local":
            return

        def targets() -> list[sysmetrics.Target]:
            out: list[sysmetrics.Target] = []
            seen: set[int] = set()
            job = self.p.backend.describe(self._handle) if self._handle else None
            for st in job.replicas if job is not None else ():
                replica = self.replicas.get(st.name)
                if replica is None or st.pid is None or st.state.done or st.pid in seen:
                    continue
                seen.add(st.pid)  # an mpirun launcher leads several replicas: its tree once
                out.append(sysmetrics.Target(st.pid, st.name, str(replica.role), replica.index, replica.rank))
            return out

        self._system = sysmetrics.SystemMetrics(self.spool_dir, self.id, targets, interval).start()

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
            self._pause_run_clock()  # the attempt has ended: its running time is counted
            if self.liveness is not None:
                self.liveness.close()  # a stall notice is taken back; the next attempt starts afresh
            backend.cancel(handle)  # idempotent; leaves nothing of this attempt behind
            self._join_tails()
            final = backend.describe(handle)
            if final is not None:
                self._record(final)

    def _watch(self, handle: str) -> tuple[ExperimentStatus, str | None]:
        backend = self.p.backend
        plan = self.p.plan
        pending_reason: str | None = None
        chief_done_at: float | None = None
        while True:
            self._flush_tails()  # what the replicas printed since the last poll reaches the spool
            if self._stop_requested():
                backend.cancel(handle)
                return ExperimentStatus.STOPPED, self.stop_reason
            job = backend.describe(handle)
            if job is None:
                return ExperimentStatus.FAILED, f"the {backend.name} engine no longer knows the job {handle}"
            self._follow_requeue(job)
            if job.status is ExperimentStatus.PENDING:
                self._pause_run_clock()  # pending (again, after a requeue): not the experiment's time
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
                if self._running_since is None:
                    self._running_since = time.monotonic()
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
            if self.liveness is not None:
                running = {r.name: r.pid for r in job.replicas if r.state is ReplicaState.RUNNING}
                stalled = self.liveness.check(running, self._last_steps)
                if stalled:
                    backend.cancel(handle)
                    return ExperimentStatus.FAILED, stalled
            if plan.max_run_seconds and self._run_seconds() > plan.max_run_seconds:
                backend.cancel(handle)
                return (
                    ExperimentStatus.FAILED,
                    f"ran longer than max_run_seconds ({plan.max_run_seconds:g} s)",
                )
            time.sleep(POLL_SECONDS)

    def _last_steps(self) -> Mapping[str, int]:
        """replica -> the last step it reported, once what the spool holds is in the store."""
        from phalanx import stragglers
        from phalanx.ingest import Ingester

        with contextlib.suppress(Exception):  # the ingest thread does the same: this only hurries it
            Ingester(self.store, None, self.spool_dir, cleanup=False).run_once()
        return stragglers.last_steps(self.store, self.id)

    # max_run_seconds counts the time the experiment's replicas ran, every attempt's together, and
    # the same way for both decisions it takes part in: stopping a running group and restarting a
    # failed one. Time pending in a cluster's queue (Slurm, Kubernetes) or waiting in this machine's
    # queue is not the experiment's: a job pending behind another neither fails for it nor loses
    # its restarts to it.
    def _pause_run_clock(self) -> None:
        if self._running_since is not None:
            self._ran_seconds += time.monotonic() - self._running_since
            self._running_since = None

    def _run_seconds(self) -> float:
        """How long the experiment's replicas have run, over every attempt so far."""
        now = time.monotonic()
        return self._ran_seconds + (now - self._running_since if self._running_since is not None else 0.0)

    def _past_deadline(self) -> bool:
        """Whether the experiment has run max_run_seconds already (no time left for a restart)."""
        limit = self.p.plan.max_run_seconds
        return bool(limit) and self._run_seconds() >= (limit or 0)

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
        # an engine that quoted the lines itself (an mpirun unit: the failed rank's own lines)
        # knows better than this replica's merged tail, which ends with mpirun's boilerplate
        if tail is not None and "\n" not in what:
            tail.thread.join(timeout=5)  # let its last lines arrive
            lines = [line for line in tail.last if line.strip()]
            if lines:
                reason += "; last lines of its log:\n" + "\n".join(f"  {line}" for line in lines)
        return reason
