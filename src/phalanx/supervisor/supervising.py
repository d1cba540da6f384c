"""The supervision loop: one experiment from its first group started to its recorded outcome.

The Supervisor composes small collaborators, each handed what it needs and owning its own state
(Determined's ``core.Context`` is the model): ``LazyStore`` (the store, opened when first needed),
``StopRequests`` (signals and the stop file), ``RunClock`` (max_run_seconds), ``Console`` (every
replica's lines to the spool and the observer), ``Recorder`` (the experiment's rows and its outcome),
``Admitter`` (the machine's queue) and ``Attempts`` (resume, attempts, repro records, checkpoints).
What is left here is the loop: start a group, watch it, restart it, end.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import signal
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any

from phalanx import queue, stragglers
from phalanx.backends.base import DryRun, JobStatus, ReplicaStatus
from phalanx.backends.local.boxes import SECRET_NAMES
from phalanx.config import Settings
from phalanx.domain import ExperimentStatus, Framework, ReplicaState, Role, plural
from phalanx.errors import PhalanxError, StoreUnavailable
from phalanx.ingest import Ingester
from phalanx.ingest_helpers import HELPERS_LOG, Helpers
from phalanx.machine import sysmetrics
from phalanx.machine.procs import INGESTER_RECORD, record_process, recorded_process
from phalanx.spool import SpoolWriter
from phalanx.store import through_outage
from phalanx.store.lite import LiteReader
from phalanx.store.migrations import HEAD
from phalanx.store.sealing import unseal
from phalanx.supervisor.admitting import Admitter
from phalanx.supervisor.attempts import Attempts
from phalanx.supervisor.clock import RunClock
from phalanx.supervisor.console import Console
from phalanx.supervisor.liveness import StallNotices, watchdog
from phalanx.supervisor.notices import Notices, StragglerWatch
from phalanx.supervisor.opener import LazyStore
from phalanx.supervisor.outcome import PID_FILE, LoggingObserver, Observer, Outcome, Shielded
from phalanx.supervisor.preparing import Prepared, ingester_here
from phalanx.supervisor.recording import Recorder, replicas_of
from phalanx.supervisor.stopping import StopRequests

log = logging.getLogger(__name__)


POLL_SECONDS = 0.1
# Once a TensorFlow chief has succeeded, its workers get this long to end by themselves
# (MultiWorkerMirroredStrategy workers do, and flush what they report) before the servers that
# never end (ParameterServerStrategy's tf.distribute.Server.join()) are stopped. Once every worker
# has ended, the ps servers are stopped at once.
TF_SERVER_GRACE_SECONDS = 5.0
# A group whose replica lost the rendezvous port Phalanx probed for it to another process (between
# the probe and the replica's bind: phalanx.machine.ports) starts again on new ports, this many
# times at most, without counting against max_restarts: the run did not fail, the machine's port did.
PORTS_LOST_RETRIES = 3


class Supervisor:
    def __init__(
        self,
        prepared: Prepared,
        store: LazyStore,
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
        store_patience: float = 0.0,
    ) -> None:
        """``store``: the store, opened when first needed (once the replicas have started).
        ``store_patience``: how long what it must read before the start (the project's secrets) waits
        through an outage of the database (a submit a server accepted: as long as its opener).
        ``notify``: a FIFO that gets one byte once the outcome is recorded (a group's controller
        waits on it: it notices a trial's end at once instead of at its next poll).
        ``params_section``: record the declared params as the experiment's params in this section
        (``Declared``; a group trial's sampled values in ``Trial``: `phalanx params`, the run table,
        compare); None records none.
        ``exists``: its row was recorded already (``record_building``: status building while its
        environment was built; or by the server when it accepted the submit), so it is updated, not
        created.
        ``priority``: its place in this machine's queue (higher first); ``wait``: False refuses
        (UsageError) instead of queueing when the topology does not fit now (local engine only).
        ``resume``: continue an existing failed or stopped experiment (`phalanx resume`) as a new
        attempt, from its latest checkpoint, instead of creating one."""
        self.p = prepared
        self.settings = settings
        self.handle_signals = handle_signals
        self.resume = resume
        self.params_section = params_section
        self.id = prepared.experiment_id
        self.run_dir = settings.runs_dir / self.id
        self.spool_dir = settings.spool_dir / self.id
        self.replicas = replicas_of(prepared)
        self.observer: Observer = Shielded(observer or LoggingObserver())
        self.store = store
        self.store_patience = store_patience
        self.notices = Notices(self.id, lambda: self.store.opened, self.observer.message)
        self.pace = StragglerWatch(self.notices)
        self.liveness = watchdog(
            prepared.plan.stall,
            StallNotices(self.notices),
            lambda name: list(self.console.tails[name].last) if name in self.console.tails else [],
        )
        self.stop = StopRequests(self.run_dir)
        self.clock = RunClock()
        # a stream of its own per supervisor process: once ingested it is removed (Recorder.tidy),
        # and a later supervisor of the same experiment (a resume) must not reopen a stream the
        # store has seen
        stream = f"console-{self.id}-{os.getpid()}-{secrets.token_hex(4)}"
        self.spool = SpoolWriter(self.spool_dir, experiment_id=self.id, stream=stream)
        self.console = Console(self.spool, self.observer, self.replicas, self.liveness)
        self.rows = Recorder(
            self.id,
            self.replicas,
            self.store,
            self.observer,
            elapsed=self.clock.elapsed,
            spool_dir=self.spool_dir,
            exists=exists,
            notify=notify,
        )
        self.admission = Admitter(
            queue.ledger_for(settings),
            self.store,
            self.rows,
            self.observer,
            self.stop,
            self.clock,
            priority=priority,
            wait=wait,
            notices=self.notices,
            database_url=settings.database_url,
        )
        self.attempts = Attempts(
            self.id,
            self.store,
            prepared.backend,
            self.console,
            self.observer,
            run_dir=self.run_dir,
            spool_dir=self.spool_dir,
            cache=settings.home / "cache",
        )
        self.submitted_at: float | None = None  # wall clock of the first submit: the experiment's start
        self._handle: str | None = None  # the group running now (the system-metrics sampler's)
        self._system: sysmetrics.SystemMetrics | None = None  # while replicas run here

    # -- the run --------------------------------------------------------------------------------
    def run(self) -> Outcome:
        """Start the replicas, supervise them to the end, record the outcome; returns it.

        The first group is started before the store is opened: importing SQLAlchemy and checking
        the schema then overlaps with the replicas' own start-up (importing torch) instead of
        delaying it. Should the store fail, the replicas are stopped before the error propagates.
        """
        self.run_dir.mkdir(parents=True, exist_ok=True)
        # a stop file here already is a request made before we started (Run.cancel right after
        # submit): ids are never reused, so it is honoured, not cleared
        if not self.resume:  # a resume records itself once it has won the reopen (Attempts.reopen)
            record_process(self.run_dir / PID_FILE)  # "pid start-time host": what a stop trusts
        previous = self._install_signals()
        stop_ingest = threading.Event()
        ingest_thread: threading.Thread | None = None
        created = False
        outcome = Outcome(self.id, ExperimentStatus.FAILED, "the supervisor did not finish")
        try:
            self.p = ingester_here(self.p)
            if self.resume:
                self.attempts.reopen()
                self.rows.found()
            if not self.stop.requested():
                self.p = self.admission.admit(self.p)  # may wait in the queue, recorded as queued
            created = self.rows.created
            self.submitted_at = time.time()  # the store is opened after the submit (see above)
            handle = self._start_resumed() if self.resume else self._start_first()
            # announced once the engine has taken it: a submit that fails names no experiment
            self.observer.message(
                f"experiment {self.id} ({plural(len(self.replicas), 'replica')}, {self.p.backend.name})"
            )
            created = True
            params = self.p.plan.params
            if self.params_section and params and not self.resume:  # a resume has them already
                self.console.record_params(self.params_section, params)
            ingest_thread = self._start_ingester(stop_ingest)
            outcome = self._run_attempts(handle)
        except PhalanxError as exc:  # why it could not go on (its folder gone, its engine down)
            self._cancel_group()
            outcome = Outcome(self.id, ExperimentStatus.FAILED, str(exc))
            if self.stop.requested():
                outcome = Outcome(self.id, ExperimentStatus.STOPPED, self.stop.reason)
            if not (created or self.rows.created) or isinstance(exc, StoreUnavailable):
                raise  # nothing recorded (the caller says why: exit 2 for a mistake), or no store opens
            # recorded (queued, accepted by a server, a resume): it failed, and is reported as failures are
        except BaseException as exc:
            self._cancel_group()
            outcome = Outcome(self.id, ExperimentStatus.FAILED, f"the supervisor failed: {exc}")
            raise
        finally:
            outcome = self._wind_up(outcome, previous, stop_ingest, ingest_thread, created)
        return outcome

    def _cancel_group(self) -> None:
        """The group started last, ended whatever stopped the supervision: nothing outlives its
        experiment (a cluster job would; a local replica's leader would end with this process)."""
        if self._handle is not None:
            with contextlib.suppress(Exception):
                self.p.backend.cancel(self._handle)

    def _start_first(self) -> str | None:
        """The first group (None: a stop came first), then the experiment's row in the store."""
        started_ns = time.time_ns()  # what changes in the folder after this is the replicas' output
        handle = None if self.stop.requested() else self._submit(self.p.dry_run)
        # after the replicas: a reaper is forked from here only while no other thread runs (issue 42)
        self.attempts.start_repro(self.p, started_ns=started_ns)
        self._start_system_metrics()  # before the store opens: the replicas are starting now
        try:
            self.store()  # opened now, whatever comes next (the repro thread waits for it)
            if not self.rows.created:
                self.rows.create(self.p, ExperimentStatus.STARTING, created_at=self.submitted_at)
            elif handle is not None:  # recorded before (building, or by the server at submit)
                self.rows.started(self.p)
            self.admission.stop_abandoned()
        except BaseException:
            if handle is not None:
                self.p.backend.cancel(handle)
                self.console.join()
            raise
        self.store.ready()
        return handle

    def _start_resumed(self) -> str | None:
        """`phalanx resume`: start a group from the reopened experiment's latest checkpoint."""
        if self.stop.requested():
            return None
        context = self.attempts.resume_context(self.p.context)
        started_ns = time.time_ns()  # as _start_first's: what changes after is the replicas' output
        handle = self._submit(self.p.backend.dry_run(self.p.plan, context))
        attempt = context.tracking_env.get("PHALANX_ATTEMPT")
        self.attempts.start_repro(  # the code may have been edited
            self.p, attempt=int(attempt) if attempt else None, started_ns=started_ns
        )
        self._start_system_metrics()
        return handle

    def _wind_up(
        self,
        outcome: Outcome,
        previous: Mapping[int, Any],
        stop_ingest: threading.Event,
        ingest_thread: threading.Thread | None,
        created: bool,
    ) -> Outcome:
        """Whatever happened: the threads stopped, the outcome recorded (with the console lines
        that could not be stored), the spool tidied, the ledger left and the pid file removed."""
        self._restore_signals(previous)
        self.observer.flush()  # the replicas' last lines, before any note of the end
        if self._system is not None:
            self._system.stop()
        self.spool.close()
        stop_ingest.set()
        if ingest_thread is not None:
            ingest_thread.join(timeout=120)
        self.attempts.join_repro()
        if self.console.lost:  # never silently: the user must know the console is incomplete
            note = f"{self.console.lost} console line(s) could not be stored"
            outcome = replace(outcome, reason=f"{outcome.reason}; {note}" if outcome.reason else note)
            self.observer.message(note)
        if created or self.rows.created:
            self.rows.finish(outcome)
            writers = [self.spool] + ([self._system.writer] if self._system is not None else [])
            handle = self._handle
            discard = (lambda: self.p.backend.discard_logs(handle)) if handle is not None else None
            self.rows.tidy(
                writers, discard, ingested=ingest_thread is not None and not ingest_thread.is_alive()
            )
        self.admission.release()  # after the replicas are gone: their cores are free
        if recorded_process(self.run_dir / PID_FILE) == os.getpid():  # a resume that lost
            (self.run_dir / PID_FILE).unlink(missing_ok=True)  # leaves the winner's record
        return outcome

    def _project_secrets(self) -> dict[str, str]:
        """The project's secrets in clear, read through the lean reader when it can (an up-to-date
        SQLite file): they are read before the store is opened (``opener.LazyStore``), and a run
        that records through the lean writer never opens the full store (SQLAlchemy)."""
        project, home = self.p.plan.project, self.settings.home
        reader = LiteReader.open(self.settings.database_url, HEAD)
        if reader is not None:
            with reader:
                return unseal(reader.secret_ciphertexts(project), home)
        from phalanx.store import secrets  # why: its SQL imports SQLAlchemy (see the docstring)

        return through_outage(
            lambda: secrets.environment(self.store.full(), home, project), self.store_patience
        )

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
        handed = self._project_secrets()
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

    def _submit(self, dry: DryRun) -> str:
        """Start a group and the threads that tail its replicas' logs."""
        backend = self.p.backend
        with self._secrets_handed():
            handle = backend.submit(dry)
        self._handle = handle  # the group the system-metrics sampler looks at
        self.console.follow(lambda name: backend.logs(handle, name, follow=True))
        return handle

    def _start_ingester(self, stop: threading.Event) -> threading.Thread:
        # processes that join it when its replicas flood it (ingest_helpers), their words in the run folder
        helpers = Helpers(self.settings, self.spool_dir, self.run_dir / HELPERS_LOG, claimed=True)
        ingester = Ingester(self.store(), None, self.spool_dir, claimed=True, helpers=helpers)  # its own
        lease = {"lease": self.run_dir / INGESTER_RECORD}  # reads leave this folder to it meanwhile
        thread = threading.Thread(target=ingester.run, args=(stop,), kwargs=lease, name="ingest", daemon=True)
        thread.start()
        return thread

    def _start_system_metrics(self) -> None:
        """Sample each local replica's process tree into ``system/...`` series (off with
        PHALANX_SYSTEM_METRICS=off or `phalanx run --no-system-metrics`). Only for replicas whose
        leader runs on this machine: elsewhere the engine starts ``python -m phalanx.machine.sysmetrics``."""
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
                previous[sig] = signal.signal(sig, self.stop.on_signal)
        return previous

    @staticmethod
    def _restore_signals(previous: Mapping[int, Any]) -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    # -- attempts -------------------------------------------------------------------------------
    def _run_attempts(self, handle: str | None) -> Outcome:
        """The first group's attempt, then a new group after each failure while restarts are left."""
        plan = self.p.plan
        # an engine that restarts failed replicas itself (the Kubeflow operator, from backoffLimit)
        # must not be restarted a second time by us
        max_restarts = 0 if self.p.backend.restarts_itself else plan.max_restarts
        restarts = ports_lost = 0
        kind = "resume" if self.resume else "start"
        while True:
            self.attempts.add(kind)
            first = restarts == ports_lost == 0 and not self.resume
            status, reason, port_lost = self._attempt(handle, first=first)
            self.attempts.finish(self.attempts.number, status, reason)  # a requeue may have moved it on
            again = (
                status is ExperimentStatus.FAILED
                and not self.stop.requested()
                and not self.clock.past(plan.max_run_seconds)  # a new group would be stopped at once
            )
            if again and port_lost and ports_lost < PORTS_LOST_RETRIES:
                ports_lost += 1  # another process took a port Phalanx probed: not the run's failure
                kind = "restart"
                said = (
                    f"starting the group again on new ports ({ports_lost}/{PORTS_LOST_RETRIES},"
                    " not counted as a restart)"
                )
                self.observer.message(f"{reason}; {said}")
                self.console.emit_all(f"phalanx: {said} after: {reason}")
            elif again and restarts < max_restarts:
                restarts += 1
                kind = "restart"
                self.observer.message(f"{reason}; restarting the group ({restarts}/{max_restarts})")
                self.console.emit_all(
                    f"phalanx: restarting the group ({restarts}/{max_restarts}) after: {reason}"
                )
            else:
                return Outcome(self.id, status, reason, restarts)
            # a fresh dry run: new ports for the new group, and the latest checkpoint to go on from
            context = self.attempts.resume_context(self.p.context)
            try:
                handle = self._submit(self.p.backend.dry_run(plan, context))
            except PhalanxError as exc:  # its work folder gone, its engine down: it failed, with why
                if self.stop.requested():
                    return Outcome(self.id, ExperimentStatus.STOPPED, self.stop.reason, restarts)
                return Outcome(self.id, status, f"{reason}; the group could not start again: {exc}", restarts)

    def _attempt(self, handle: str | None, first: bool) -> tuple[ExperimentStatus, str | None, bool]:
        """How the group's attempt ended, and whether a replica of it lost a port the engine probed
        for it (ReplicaStatus.port_lost)."""
        backend = self.p.backend
        if handle is None:
            return ExperimentStatus.STOPPED, self.stop.reason, False
        started_at = (self.submitted_at or time.time()) if first else None
        self.rows.status_while_running(ExperimentStatus.RUNNING, handle=handle, started_at=started_at)
        self.rows.new_attempt()
        self.pace.new_attempt()
        final: JobStatus | None = None
        try:
            status, reason = self._watch(handle)
        finally:
            self.clock.pause()  # the attempt has ended: its running time is counted
            if self.liveness is not None:
                self.liveness.close()  # a stall notice is taken back; the next attempt starts afresh
            backend.cancel(handle)  # idempotent; leaves nothing of this attempt behind
            self.console.join()
            final = backend.describe(handle)
            if final is not None:
                self.rows.record(final)
        lost = (
            status is ExperimentStatus.FAILED
            and final is not None
            and any(r.port_lost for r in final.replicas)
        )
        return status, reason, lost

    def _watch(self, handle: str) -> tuple[ExperimentStatus, str | None]:
        backend = self.p.backend
        plan = self.p.plan
        pending_reason: str | None = None
        chief_done_at: float | None = None
        settled = False
        while True:
            self.console.flush()  # what the replicas printed since the last poll reaches the spool
            if self.stop.requested():
                backend.cancel(handle)
                return ExperimentStatus.STOPPED, self.stop.reason
            job = backend.describe(handle)
            if job is None:
                return ExperimentStatus.FAILED, f"the {backend.name} engine no longer knows the job {handle}"
            self.attempts.follow_requeue(job)
            if not settled and job.status is ExperimentStatus.SUCCEEDED:  # a failure stops the others first
                settled = True  # once: every replica's lines, then the note of their end
                self.console.join()  # a short job's reaper may end it before its reader read a line
            if job.status is ExperimentStatus.PENDING:
                self.clock.pause()  # pending (again, after a requeue): not the experiment's time
                if pending_reason != (job.reason or ""):
                    pending_reason = job.reason or ""
                    self.rows.status_while_running(ExperimentStatus.PENDING, reason=pending_reason)
                    self.observer.message(f"pending ({pending_reason or 'queued'})")
            else:
                if pending_reason is not None:
                    pending_reason = None
                    self.rows.status_while_running(ExperimentStatus.RUNNING, reason="")
                self.clock.running()
            self.rows.record(job)
            if self._chief_done(job):
                # the chief decides a TensorFlow experiment: what the others do now cannot fail it
                chief_done_at = chief_done_at or time.monotonic()
                # a ps serves until stopped; a worker ends by itself (MultiWorkerMirrored, or a
                # between-graph PS job's) unless it is a PS-strategy server: that one gets the grace
                servers = {r.name for r in self.p.plan.replicas if r.role is Role.PS}
                workers = [r for r in job.replicas if r.name != "master" and r.name not in servers]
                others_done = all(r.state.done for r in workers)
                if others_done or time.monotonic() - chief_done_at > TF_SERVER_GRACE_SECONDS:
                    if any(not r.state.done for r in job.replicas if r.name != "master"):
                        self.console.emit_all("phalanx: the chief succeeded; stopping the TensorFlow servers")
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
            if job.status is ExperimentStatus.RUNNING:
                self.pace.check()  # a straggling rank told once (docs/alerts.md)
            if plan.max_run_seconds and self.clock.run_seconds() > plan.max_run_seconds:
                backend.cancel(handle)
                return (
                    ExperimentStatus.FAILED,
                    f"ran longer than max_run_seconds ({plan.max_run_seconds:g} s)",
                )
            time.sleep(POLL_SECONDS)

    def _last_steps(self) -> Mapping[str, int]:
        """replica -> the last step it reported, once what the spool holds is in the store."""
        store = self.store()
        with contextlib.suppress(Exception):  # the ingest thread does the same: this only hurries it
            Ingester(store, None, self.spool_dir, cleanup=False, claimed=True).run_once()
        return stragglers.last_steps(store, self.id)

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
        # an engine that quoted the lines itself (an mpirun unit: the failed rank's own lines)
        # knows better than this replica's merged tail, which ends with mpirun's boilerplate
        if "\n" not in what:
            lines = self.console.last_lines(culprit.name)  # its last lines arrived first
            if lines:
                reason += "; last lines of its log:\n" + "\n".join(f"  {line}" for line in lines)
        return reason
