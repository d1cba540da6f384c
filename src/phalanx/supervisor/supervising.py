"""The supervision loop: one experiment from its first group started to its recorded outcome."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from phalanx.backends.base import DryRun, JobStatus, LaunchContext, ReplicaStatus
from phalanx.config import Settings
from phalanx.domain import ExperimentStatus, Framework, Replica, ReplicaState
from phalanx.plan import Plan
from phalanx.spec.model import ExperimentSpec
from phalanx.supervisor.preparing import Prepared, ingester_here, launch_json, prepare
from phalanx.supervisor.tails import LogTail, join_tails

if TYPE_CHECKING:
    from pathlib import Path

    from phalanx.store.base import IngestStore

log = logging.getLogger(__name__)

PID_FILE = "supervisor.pid"  # "pid start-time host" of the supervisor (phalanx.procs.record_process)

POLL_SECONDS = 0.1
# Once a TensorFlow chief has succeeded, the other replicas get this long to end by themselves
# (MultiWorkerMirroredStrategy workers do, and flush what they report) before the servers that
# never end (ParameterServerStrategy's tf.distribute.Server.join()) are stopped.
TF_SERVER_GRACE_SECONDS = 5.0
# How long the supervisor keeps trying to record an experiment's outcome when the store cannot be
# reached; after that the outcome goes to the spool (a durable marker the next reader applies).
STORE_RETRY_SECONDS = float(os.environ.get("PHALANX_STORE_RETRY_SECONDS", "30"))
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


class _Shielded:
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


def record_building(prepared: Prepared, store: IngestStore, settings: Settings) -> None:
    """Record the experiment, status building, before its environment is built (minutes): it has
    its id and shows in `phalanx ls` meanwhile. ``prepared``: its dry run (nothing built yet); the
    Supervisor that runs it afterwards is told it exists (``exists=True``)."""
    supervisor = Supervisor(prepared, store, settings, handle_signals=False)
    supervisor._open_store()
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
    ) -> None:
        """``store``: the store, or a function that opens it (called once the replicas have started).
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
        from phalanx.supervisor.liveness import Liveness, hang_timeout_from_env

        hang = hang_timeout_from_env()
        self.liveness = Liveness(hang) if hang else None
        self.priority = priority
        self.wait = wait
        self._admission: Any = None  # phalanx.queue.Admission while the ledger holds us
        self._created = exists
        self._existed = exists
        self.params_section = params_section
        self._system: Any = None  # phalanx.sysmetrics.SystemMetrics while replicas run here
        self._handle: str | None = None
        self.resume = resume
        self._resume_step: int | None = None  # the checkpoint step the next group continues from
        self._attempt_no: int | None = None  # the store's number of the attempt running now
        self._repro_thread: threading.Thread | None = None
        self._store_ready = threading.Event()

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
        from phalanx.procs import record_process, recorded_process
        from phalanx.tracking.spool import SpoolWriter

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
                    elif handle is not None:
                        self.store.update_experiment(self.id, status=ExperimentStatus.STARTING)
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

    # -- the machine's queue (local engine) ---------------------------------------------------------
    def _admit(self) -> None:
        """Take this experiment's cores, GPUs and memory in the machine's ledger, waiting in the
        queue (recorded as queued) until its whole topology fits; the dry run is redone with the
        exact cores and GPUs granted. Cluster engines schedule for themselves, and --oversubscribe
        asks to share: neither goes through the ledger, nor does a topology that requests nothing."""
        from dataclasses import replace

        from phalanx import queue
        from phalanx.errors import UsageError

        context = self.p.context
        if self.p.backend.name != "local" or context.oversubscribe:
            return
        need = queue.need_of_plan(self.p.plan)
        if need.empty:
            return
        admission = queue.Admission(
            self.id,
            need,
            queue.ledger_for(self.settings),
            name=self.p.plan.name,
            priority=self.priority,
            wait=self.wait,
            project=self.p.plan.project,
            limits=self._quotas,
        )
        self._admission = admission
        # its row before its ledger entry: `phalanx queue` (which reads the ledger) never lists an
        # id that `phalanx get` does not know, nor does a killed supervisor leave such an entry.
        # Not with --no-wait: there the row means "accepted" to `run -d`/submit() waiting for it, so
        # it follows the grant (a refusal then records nothing at all)
        recorded_here = self.wait and not self._created
        if recorded_here:
            self._open_store()
            self._create(ExperimentStatus.STARTING)
            self._created = True
        was_queued = False

        def queued(text: str) -> None:
            nonlocal was_queued
            was_queued = True
            self._open_store()
            if self._created:  # it exists: only its status says it waits
                self.store.update_experiment(self.id, status=ExperimentStatus.QUEUED)
            else:
                self._create(ExperimentStatus.QUEUED)
                self._created = True
            with contextlib.suppress(Exception):  # others' leftovers must not stop this experiment
                queue.mark_abandoned(self.store, admission.reclaimed or [])
            self.observer.message(text)

        try:
            grant = admission.admit(self._stop_requested, queued)
        except BaseException as exc:
            self._admission = None  # admit() left nothing in the ledger
            if recorded_here and isinstance(exc, UsageError):  # refused: nothing half-written
                with contextlib.suppress(Exception):
                    self.store.delete_experiment(self.id)
                    self._created = False
            raise
        if grant is None:  # stopped while it waited: already out of the queue
            self._admission = None
            self.stop_reason = _queued_reason(self.stop_reason, self.run_dir / "stop")
            return
        self.started = time.monotonic()  # time spent queued does not count against max_run_seconds
        context = replace(context, cpu_pool=grant.cpus, gpu_pool=grant.gpus)
        self.p = replace(self.p, context=context, dry_run=self.p.backend.dry_run(self.p.plan, context))
        if was_queued:
            self.observer.message("admitted: " + need.describe())

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

    def _after_admission(self) -> None:
        """Queued rows of `phalanx run`s killed while waiting, found while we were admitted."""
        if self._admission is not None and self._admission.reclaimed:
            from phalanx import queue

            with contextlib.suppress(Exception):
                queue.mark_abandoned(self.store, self._admission.reclaimed)

    def _reopen(self) -> None:
        """`phalanx resume`: the failed or stopped experiment runs again (before it may queue).

        Two resumes of one experiment race: under a lock, each reads the status first, so a loser
        (the winner reopened it already) leaves the pid file alone: a `phalanx resume -d` watching
        that file for its own pid never takes the winner's reopen for its own. The winner's pid
        file names it before its reopen commits (no reader ever sees the experiment starting with a
        dead supervisor recorded); should the reopen still fail, what the file said is put back."""
        import fcntl

        from phalanx.errors import not_resumable
        from phalanx.procs import record_process

        self._open_store()
        pid_file = self.run_dir / PID_FILE
        with open(self.run_dir / "resume.lock", "a+b") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes (or we die)
            current = self.store.get_experiment(self.id)
            if not current.status.resumable:
                raise not_resumable(current.id, current.status)
            try:
                before = pid_file.read_bytes()
            except FileNotFoundError:
                before = None
            record_process(pid_file)
            try:
                self.store.reopen_experiment(self.id)
            except BaseException:
                if before is None:
                    pid_file.unlink(missing_ok=True)
                else:  # atomically, as record_process writes it: a reader never sees half
                    tmp = pid_file.with_name(f"{PID_FILE}.{os.getpid()}.tmp")
                    tmp.write_bytes(before)
                    os.replace(tmp, pid_file)
                raise
        self._created = True
        # the stop request that ended the last attempt is spent: this is a new one
        with contextlib.suppress(FileNotFoundError):
            (self.run_dir / "stop").unlink()

    def _start_resumed(self) -> str | None:
        """`phalanx resume`: start a group from the reopened experiment's latest checkpoint."""
        if self._stop_requested():
            return None
        context = self._resume_context()
        handle = self._submit(self.p.backend.dry_run(self.p.plan, context))
        attempt = context.tracking_env.get("PHALANX_ATTEMPT")
        self._start_repro(attempt=int(attempt) if attempt else None)  # the code may have been edited
        self._start_system_metrics()
        return handle

    def _start_repro(self, attempt: int | None = None) -> None:
        """Record what runs (phalanx.repro) in a thread: the replicas do not wait for git or pip.

        ``attempt``: a later attempt of the experiment (`phalanx resume`), whose folder may hold
        edited code. Its record becomes the experiment's (what produced its latest result), its
        snapshot is stored beside the earlier ones, and every attempt's record is kept in order
        under ``attempts`` (repro.with_attempt), for `phalanx get`, `diff ID` and `rerun --attempt`."""
        launch = dict(getattr(self.p, "launch", None) or {})
        launch.setdefault("workdir", self.p.context.workdir)
        launch.setdefault("cluster", self.p.cluster)

        def work() -> None:
            from phalanx import repro

            try:
                record, data = repro.collect(
                    workdir=self.p.context.workdir, python=self.p.context.python, launch=launch
                )
            except Exception:
                log.exception("recording what the experiment runs failed")
                return
            self._store_ready.wait()
            if self.store is None:
                return
            try:
                original = launch.get("rerun_of")
                if original and not record.get("git"):
                    # a rerun runs an unpacked snapshot (no work tree): the code is the original's,
                    # so is its commit and uncommitted diff (`from` names where it came from)
                    git = (self.store.repro(original) or {}).get("git")
                    if git:
                        record["git"] = {**git, "from": original}
                artifacts = getattr(self.store, "artifact_store", None)
                path = repro.snapshot_path(attempt)
                if artifacts is not None:
                    artifacts.put_bytes(self.id, path, data)
                    record["snapshot"] = {**record["snapshot"], "path": path}
                else:
                    record["snapshot"] = {**record["snapshot"], "path": None}
                if attempt is not None:
                    record = repro.with_attempt(self.store.repro(self.id), record, attempt)
                self.store.set_repro(self.id, record)
            except Exception:
                log.exception("storing what the experiment runs failed")

        self._repro_thread = threading.Thread(target=work, name="repro", daemon=True)
        self._repro_thread.start()

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
            plan={**plan.to_json(), "launch": launch_json(self.p)},
            status=status,
            created_at=self.submitted_at,  # recorded after the submit, created before it started
        )

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
        leader runs on this machine: elsewhere the engine starts ``python -m phalanx.sysmetrics``."""
        from phalanx import sysmetrics

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

    def _attempts(self, handle: str | None) -> Outcome:
        plan = self.p.plan
        # an engine that restarts failed replicas itself (the Kubeflow operator, from backoffLimit)
        # must not be restarted a second time by us
        max_restarts = 0 if getattr(self.p.backend, "restarts_itself", False) else plan.max_restarts
        restarts = 0
        kind = "resume" if self.resume else "start"
        while True:
            self._attempt_no = self._add_attempt(kind)
            status, reason = self._attempt(handle, first=restarts == 0 and not self.resume)
            self._finish_attempt(self._attempt_no, status, reason)  # a requeue may have moved it on
            if (
                status is ExperimentStatus.FAILED
                and restarts < max_restarts
                and not self._stop_requested()
                and not self._past_deadline()  # a new group would be stopped at once: no restart
            ):
                restarts += 1
                kind = "restart"
                self.observer.message(f"{reason}; restarting the group ({restarts}/{max_restarts})")
                self._emit_all(f"phalanx: restarting the group ({restarts}/{max_restarts}) after: {reason}")
                # a fresh dry run: new ports for the new group, and the latest checkpoint to go on from
                handle = self._submit(self.p.backend.dry_run(plan, self._resume_context()))
                continue
            return Outcome(self.id, status, reason, restarts)

    def _add_attempt(self, kind: str) -> int | None:
        add = getattr(self.store, "add_attempt", None)
        if add is None:
            return None
        try:
            return int(add(self.id, kind=kind, checkpoint_step=self._resume_step))
        except Exception:
            log.exception("recording the attempt failed")
            return None

    def _follow_requeue(self, job: JobStatus) -> None:
        """The engine started the job again by itself (a Slurm requeue after a node failure,
        preemption or `scontrol requeue`): the attempt it runs now is recorded as a new one, so the
        attempts in `phalanx get` match the numbers the tasks report their points with."""
        while job.attempt is not None and self._attempt_no is not None and job.attempt > self._attempt_no:
            why = f"requeued by {self.p.backend.name}"
            self._finish_attempt(self._attempt_no, ExperimentStatus.FAILED, why)
            self._attempt_no = self._add_attempt("requeue")
            self.observer.message(f"{why}; attempt {self._attempt_no} starts")
            self._emit_all(f"phalanx: {why}; attempt {self._attempt_no} starts")

    def _finish_attempt(self, number: int | None, status: ExperimentStatus, reason: str | None) -> None:
        finish = getattr(self.store, "finish_attempt", None)
        if number is None or finish is None:
            return
        with contextlib.suppress(Exception):
            finish(self.id, number, status=status, reason=reason)

    def _resume_context(self) -> LaunchContext:
        """The launch context of a new group: PHALANX_RESUME_CHECKPOINT / _STEP / _METRICS name the
        experiment's latest checkpoint (what ``task.latest_checkpoint()`` returns), once everything
        the failed group wrote to the spool is in the store."""
        from phalanx.checkpoints import ENV_RESUME, ENV_RESUME_STEP, from_artifacts, latest

        with contextlib.suppress(Exception):  # the ingest thread does the same work: this only hurries it
            from phalanx.ingest import Ingester

            Ingester(self.store, None, self.spool_dir, cleanup=False).run_once()
        context = self._with_attempt(self.p.context)
        self._resume_step = None
        try:
            ckpt = latest(from_artifacts(self.store.artifacts(self.id)))
        except Exception:
            log.exception("looking up the latest checkpoint failed; restarting from scratch")
            return context
        if ckpt is None:
            return context
        path = self._local_checkpoint(ckpt.path)
        if path is None:
            return context
        self._resume_step = ckpt.step
        self._emit_all(f"phalanx: continuing from checkpoint step {ckpt.step} ({ckpt.name})")
        env = {
            ENV_RESUME: path,
            ENV_RESUME_STEP: str(ckpt.step),
            "PHALANX_RESUME_METRICS": json.dumps(dict(ckpt.metrics)),
        }
        return replace(context, tracking_env={**context.tracking_env, **env})

    def _with_attempt(self, context: LaunchContext) -> LaunchContext:
        """PHALANX_ATTEMPT: the number the next group's attempt gets in the store, so its points
        replace the steps earlier attempts reported (store.sql.attempts) instead of repeating them."""
        attempts = getattr(self.store, "attempts", None)
        if attempts is None:
            return context
        try:
            numbers = [int(a["number"]) for a in attempts(self.id)]
        except Exception:
            log.exception("reading the attempts failed; the new group's points are appended")
            return context
        env = {**context.tracking_env, "PHALANX_ATTEMPT": str(max(numbers, default=-1) + 1)}
        return replace(context, tracking_env=env)

    def _local_checkpoint(self, path: str) -> str | None:
        """A local path of a stored checkpoint: where the artifact store keeps it when that is a
        folder here, else a copy downloaded under the run folder."""
        artifacts = getattr(self.store, "artifact_store", None)
        if artifacts is None:
            return None
        if artifacts.local:
            return str(artifacts.url(self.id, path))
        return str(artifacts.download(self.id, path, self.run_dir / "resume"))

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

    # -- recording --------------------------------------------------------------------------------
    def _record(self, job: JobStatus) -> None:
        """Write replica rows whose state changed (the supervisor is their only writer). A store
        that cannot be reached does not stop supervision: the row is written at the next poll
        (or with the outcome)."""
        try:
            self._record_rows(job)
        except Exception as exc:
            now = time.monotonic()
            if now - self._store_warned > 30:
                self._store_warned = now
                self.observer.message(f"the store cannot be reached ({_short(exc)}); retrying")

    def _record_rows(self, job: JobStatus) -> None:
        changed = False
        for r in job.replicas:
            old = self.states.get(r.name)
            if old == r:
                continue
            if r.name not in self.replicas:
                self.states[r.name] = r
                continue
            changed = True
            now = time.time()
            # started: the first state past PENDING. An engine that queues (Slurm, Kubernetes) shows
            # PENDING first; a replica seen waiting gets its start time when it leaves it, unless it
            # ended without ever landing on a node (cancelled while queued: it never started).
            # Ended between two polls, it started no later than it finished.
            landed = not r.state.done or r.host is not None
            waited = old is not None and old.state is ReplicaState.PENDING and landed
            started = (old is None or waited) and r.state is not ReplicaState.PENDING
            started_at = min(now, r.finished_at) if r.finished_at else now
            self.store.update_replica(
                self.id,
                r.name,
                state=r.state,
                host=r.host,
                pid=r.pid,
                exit_code=r.exit_code,
                reason=r.reason,
                started_at=started_at if started else None,
                finished_at=(r.finished_at or now) if r.state.done else None,
                # the first write of this attempt (a restart's group): the previous attempt's exit
                # code and reason ("was killed by SIGKILL") are not this replica's any more
                fresh=old is None,
            )
            self.states[r.name] = r  # only once written: a failed write is tried again
        if changed:
            elapsed = time.monotonic() - self.started
            self.observer.states({n: s.state for n, s in self.states.items()}, elapsed)

    def _line(self, replica: Replica, text: str) -> None:
        """A supervisor note in a replica's console: spooled (after what the replica printed
        before it), then shown."""
        tail = self.tails.get(replica.name)
        if tail is not None:
            tail.flush()
        self._spool_lines(replica, [text])
        self._show(replica, text)

    def _show(self, replica: Replica, text: str) -> None:
        if self.liveness is not None:
            self.liveness.output(replica.name)
        self.observer.line(replica.name, text)

    def _spool_lines(self, replica: Replica, lines: list[str]) -> None:
        # ValueError: the writer closed under a late line at shutdown (a stuck reader given up on);
        # OSError: the disk is full. The lines still reach the terminal; the outcome counts them.
        try:
            self._spool.write(
                "log",
                {"stream": "stdout", "lines": lines},
                replica=replica.name,
                role=str(replica.role),
                index=replica.index,
                rank=replica.rank,
            )
        except (ValueError, OSError):
            self.lost_lines += len(lines)

    def _flush_tails(self) -> None:
        for tail in list(self.tails.values()):
            tail.flush()

    def _record_launch_params(self) -> None:
        """The launch params as tracked params (PARAM event of the first replica, rank 0 where
        there is one), once per experiment: a resume has them already."""
        params = dict(self.p.plan.launch_params)
        if not self.params_section or not params or self.resume:
            return
        first = min(self.replicas.values(), key=lambda r: (r.rank is None, r.rank or 0))
        values = {
            k: v if isinstance(v, (str, int, float, bool)) or v is None else json.dumps(v)
            for k, v in params.items()
        }
        with contextlib.suppress(ValueError, OSError):
            self._spool.write(
                "param",
                {"section": self.params_section, "values": values},
                replica=first.name,
                role=str(first.role),
                index=first.index,
                rank=first.rank,
            )

    def _emit_all(self, text: str) -> None:
        """A supervisor note in the console of every replica (restarts, servers stopped)."""
        for replica in self.replicas.values():
            self._line(replica, text)

    def _tidy(self, ingested: bool) -> None:
        """Keep one copy of the console, the store's: once every line this supervisor spooled is
        ingested, its spool file goes (docs/tracking.md), and so do the engine's log files (local,
        Slurm), which held the same lines again. Anything not yet ingested stays for the next ingester."""
        if not ingested:
            return
        try:
            position = getattr(self.store, "ingest_position", None)
            if position is None:
                return
            # the console and the system-metrics samples: each stream this supervisor wrote
            writers = [self._spool, getattr(self._system, "writer", None)]
            for writer in [w for w in writers if w is not None]:
                path = writer.path
                if path.exists() and position(writer.stream)[0] < path.stat().st_size:
                    return  # not all ingested: the next ingester takes the rest
            for writer in [w for w in writers if w is not None]:
                writer.path.unlink(missing_ok=True)
                writer.path.with_suffix(".ack").unlink(missing_ok=True)
            if self._handle is not None:  # the engine's copies of the console (every attempt's)
                self.p.backend.discard_logs(self._handle)
            with contextlib.suppress(OSError):
                self.spool_dir.rmdir()  # only when nothing else (a script's stream) is left in it
        except Exception as exc:  # tidying must never change the outcome (e.g. the store is down)
            log.warning("could not remove the ingested console spool of %s (%s)", self.id, _short(exc))
            log.debug("tidy failure", exc_info=True)

    def _finish(self, outcome: Outcome) -> None:
        """Record the outcome, retrying while the store is unreachable; if it stays away, leave the
        outcome in the spool (fsynced) for the next reader to apply, and say so: the experiment
        must not stay `running` because the database was down when its replicas ended."""
        deadline = time.monotonic() + STORE_RETRY_SECONDS
        delay = 0.2
        while True:
            try:
                self._write_outcome(outcome)
                return
            except Exception as exc:
                if time.monotonic() >= deadline:
                    self._outcome_to_spool(outcome)
                    self.observer.message(
                        f"the store cannot be reached ({_short(exc)}); the outcome is kept in "
                        f"{self.spool_dir} and recorded by the next phalanx command"
                    )
                    return
                log.warning("recording the outcome failed (%s); retrying", _short(exc))
                time.sleep(delay)
                delay = min(delay * 2, 5.0)

    def _outcome_to_spool(self, outcome: Outcome) -> None:
        """The outcome as STATUS events (one per replica, each with its own final state), which
        ingest applies like any other record, exactly once."""
        from phalanx.tracking.spool import SpoolWriter

        with SpoolWriter(self.spool_dir, experiment_id=self.id, stream=f"outcome-{self.id}") as writer:
            for name, r in self.replicas.items():
                st = self.states.get(name)
                state = st.state if st is not None and st.state.done else _unfinished_state(outcome)
                data: dict[str, Any] = {"status": outcome.status.value, "replica_state": state.value}
                if outcome.reason:
                    data["reason"] = outcome.reason
                if st is not None:
                    data["replica_exit_code"] = st.exit_code
                    data["replica_reason"] = st.reason
                writer.write("status", data, replica=name, role=str(r.role), index=r.index, rank=r.rank)

    def _write_outcome(self, outcome: Outcome) -> None:
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


def _short(exc: BaseException) -> str:
    """An exception in one line (a database driver's message can run over many)."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text[:200]}" if text else type(exc).__name__


def _unfinished_state(outcome: Outcome) -> ReplicaState:
    return ReplicaState.SUCCEEDED if outcome.status is ExperimentStatus.SUCCEEDED else ReplicaState.STOPPED


def _queued_reason(reason: str | None, stop_file: Path) -> str:
    """The reason of an experiment stopped before it left the queue: it never ran, so "stopped by
    SIGTERM" (the signal `phalanx stop` sends) told the user less than the truth. A reason left
    with the request (a group's stop or pruning) is kept as it is; else it says a stop request or
    the signal did it."""
    requested = _requested_reason(stop_file)
    if requested:
        return requested
    how = "a stop request" if stop_file.exists() else (reason or "stopped").removeprefix("stopped by ")
    return f"stopped while queued (by {how})"


def _requested_reason(path: Any) -> str | None:
    """The reason written on the stop file's second line (a group's pruning says why), if any."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    return lines[1].strip() or None if len(lines) > 1 else None
