"""What the supervisor records in the store, the only writer of its experiment's rows while it
lives: the experiment (created, or found already there), each replica's state as it changes, and the
outcome, kept in the spool when the store cannot be reached; then the console's spool, once ingested."""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from phalanx import knobs
from phalanx.backends.base import JobStatus, ReplicaStatus
from phalanx.domain import ExperimentStatus, Replica, ReplicaState
from phalanx.errors import BackendUnavailable, NotFound
from phalanx.spool import SpoolWriter
from phalanx.supervisor.outcome import Observer, Outcome
from phalanx.supervisor.preparing import Prepared, launch_json

if TYPE_CHECKING:
    from phalanx.store.base import IngestStore
    from phalanx.store.run_store import RunStore
    from phalanx.supervisor.opener import LazyStore

log = logging.getLogger(__name__)

STORE_WARN_SECONDS = 30  # an unreachable store is said at most this often while the replicas run


def replicas_of(prepared: Prepared) -> dict[str, Replica]:
    """The experiment's replica rows as its plan names them, before any has started."""
    return {
        r.name: Replica(
            experiment_id=prepared.experiment_id,
            name=r.name,
            role=r.role,
            index=r.index,
            rank=r.rank,
            resources=r.resources.to_json(),
        )
        for r in prepared.plan.replicas
    }


def create_experiment(
    store: RunStore,
    prepared: Prepared,
    status: ExperimentStatus = ExperimentStatus.STARTING,
    created_at: float | None = None,
) -> None:
    """The experiment's row and its replicas' rows; ``created_at``: when its first group was
    submitted (it is recorded after the submit, created before it started), else now."""
    plan = prepared.plan
    store.create_experiment(
        experiment_id=prepared.experiment_id,
        name=plan.name,
        project=plan.project,
        replicas=list(replicas_of(prepared).values()),
        framework=str(plan.framework) if plan.framework else None,
        backend=prepared.backend.name,
        cluster=prepared.cluster,
        tags=plan.tags,
        topology=plan.topology(),
        spec_text=plan.source_text,
        plan=plan_doc(prepared),
        status=status,
        created_at=created_at,
    )


def plan_doc(prepared: Prepared) -> dict[str, Any]:
    """The plan as the experiment's row keeps it, with how it was launched."""
    return {**prepared.plan.to_json(), "launch": launch_json(prepared)}


def record_building(prepared: Prepared, store: IngestStore, *, accepted: bool = False) -> None:
    """Record the experiment, status building, before its environment is built (minutes): it has
    its id and shows in `phalanx ls` meanwhile. ``prepared``: its dry run (nothing built yet); the
    Supervisor that runs it afterwards is told it exists (``exists=True``). ``accepted``: the
    server recorded it at submit (status created): that row says building now."""
    if accepted:
        store.update_experiment(
            prepared.experiment_id, status=ExperimentStatus.BUILDING, plan=plan_doc(prepared)
        )
    else:
        create_experiment(store, prepared, ExperimentStatus.BUILDING)


class Recorder:
    """The experiment's rows, written through ``store`` (opened when first needed). ``exists``: the
    row was recorded already (status building while its environment was built). ``elapsed``: how
    long it has been supervised (shown with the replicas' states). ``spool_dir``: where the outcome
    goes when the store stays unreachable. ``notify``: a FIFO that gets one byte once the outcome is
    recorded (a group's controller waits on it)."""

    def __init__(
        self,
        experiment_id: str,
        replicas: Mapping[str, Replica],
        store: LazyStore,
        observer: Observer,
        *,
        elapsed: Callable[[], float],
        spool_dir: Path,
        exists: bool = False,
        notify: str | None = None,
    ) -> None:
        self.id = experiment_id
        self.replicas = replicas
        self.store = store
        self.observer = observer
        self.elapsed = elapsed
        self.spool_dir = spool_dir
        self.notify = notify
        self.created = exists  # the experiment's row exists
        self.states: dict[str, ReplicaStatus] = {}  # as last written, this attempt
        self._warned = float("-inf")

    # -- the experiment's row ----------------------------------------------------------------------
    def create(
        self,
        prepared: Prepared,
        status: ExperimentStatus = ExperimentStatus.STARTING,
        created_at: float | None = None,
    ) -> None:
        tries = 0

        def write() -> None:
            nonlocal tries
            tries += 1
            # a try whose commit was made but whose answer was lost with the connection: done
            if tries == 1 or not self._row_exists():
                create_experiment(self.store(), prepared, status, created_at)

        self._patiently(write, "recording the experiment")
        self.created = True

    def _row_exists(self) -> bool:
        try:
            self.store().get_experiment(self.id)
        except NotFound:
            return False
        return True

    def found(self) -> None:
        """The row exists already (a resume reopened it)."""
        self.created = True

    def withdraw(self, reason: str) -> None:
        """A launch refused before it ran (by the machine's queue): nothing half-written. The store
        deletes no live row, so it is ended first (a reader may see that for a moment)."""
        with contextlib.suppress(Exception):
            store = self.store()
            store.update_experiment(
                self.id, status=ExperimentStatus.STOPPED, reason=reason, finished_at=time.time()
            )
            store.delete_experiment(self.id)
            self.created = False

    def started(self, prepared: Prepared) -> None:
        """Its first group started, the row recorded before (building, or by the server at submit):
        status starting, and the plan as it was launched."""
        self._patiently(
            lambda: self.store().update_experiment(
                self.id, status=ExperimentStatus.STARTING, plan=plan_doc(prepared)
            ),
            "recording the start",
        )

    def status(
        self,
        status: ExperimentStatus,
        *,
        reason: str | None = None,
        handle: str | None = None,
        started_at: float | None = None,
    ) -> None:
        """The experiment's status while it lives (None leaves a field as it is)."""
        self._patiently(
            lambda: self.store().update_experiment(
                self.id, status=status, reason=reason, handle=handle, started_at=started_at
            ),
            f"recording status {status.value}",
        )

    def status_while_running(
        self,
        status: ExperimentStatus,
        *,
        reason: str | None = None,
        handle: str | None = None,
        started_at: float | None = None,
    ) -> None:
        """``status`` of a group that runs (running, pending again): a store still away after the
        retries does not stop supervision, as a replica's row does not (``record``); the outcome,
        recorded at the end or kept in the spool for the next reader, says how it ended. A database
        that went away at that write used to fail an experiment whose replicas were running."""
        try:
            self.status(status, reason=reason, handle=handle, started_at=started_at)
        except BackendUnavailable as exc:
            self._say_unreachable(exc)

    def _say_unreachable(self, exc: Exception) -> None:
        now = time.monotonic()
        if now - self._warned > STORE_WARN_SECONDS:
            self._warned = now
            self.observer.message(f"the store cannot be reached ({_short(exc)}); retrying")

    def _patiently(self, write: Callable[[], object], what: str) -> None:
        """``write``, tried again while the store cannot be reached (a database restarting: a
        submit the server answered must run through it) for STORE_RETRY_SECONDS; after that its
        BackendUnavailable propagates. Any other error propagates at once."""
        deadline = time.monotonic() + knobs.STORE_RETRY_SECONDS.value()
        delay = 0.2
        while True:
            try:
                write()
                return
            except BackendUnavailable as exc:
                if time.monotonic() >= deadline:
                    raise
                log.warning("%s failed (%s); retrying", what, _short(exc))
                time.sleep(delay)
                delay = min(delay * 2, 5.0)

    # -- replicas ----------------------------------------------------------------------------------
    def new_attempt(self) -> None:
        """A new group: its replicas' first states are written afresh."""
        self.states = {}

    def record(self, job: JobStatus) -> None:
        """Write replica rows whose state changed (the supervisor is their only writer). A store
        that cannot be reached does not stop supervision: the row is written at the next poll
        (or with the outcome)."""
        try:
            self._record_rows(job)
        except Exception as exc:
            self._say_unreachable(exc)

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
            # when the engine started it, where it knows (the local engine): the store's write lock may
            # have kept this first record waiting well after the replica was running
            began = r.started_at if r.started_at is not None and r.started_at <= now else now
            started_at = min(began, r.finished_at) if r.finished_at else began
            self.store().update_replica(
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
            self.observer.states({n: s.state for n, s in self.states.items()}, self.elapsed())

    # -- the outcome and after ---------------------------------------------------------------------
    def tidy(
        self, writers: Sequence[SpoolWriter], discard_logs: Callable[[], None] | None, *, ingested: bool
    ) -> None:
        """Keep one copy of the console, the store's: once every line this supervisor spooled
        (``writers``: its streams, the console's and the system metrics') is ingested, its spool
        files go (docs/tracking.md), and so do the engine's log files (local, Slurm:
        ``discard_logs``), which held the same lines again. Anything not yet ingested stays for the
        next ingester."""
        if not ingested:
            return
        try:
            store = self.store()
            for writer in writers:
                path = writer.path
                if path.exists() and store.ingest_position(writer.stream)[0] < path.stat().st_size:
                    return  # not all ingested: the next ingester takes the rest
            for writer in writers:
                writer.path.unlink(missing_ok=True)
                writer.path.with_suffix(".ack").unlink(missing_ok=True)
            if discard_logs is not None:  # the engine's copies of the console (every attempt's)
                discard_logs()
            with contextlib.suppress(OSError):
                self.spool_dir.rmdir()  # only when nothing else (a script's stream) is left in it
        except Exception as exc:  # tidying must never change the outcome (e.g. the store is down)
            log.warning("could not remove the ingested console spool of %s (%s)", self.id, _short(exc))
            log.debug("tidy failure", exc_info=True)

    def finish(self, outcome: Outcome) -> None:
        """Record the outcome, retrying while the store is unreachable; if it stays away, leave the
        outcome in the spool (fsynced) for the next reader to apply, and say so: the experiment
        must not stay `running` because the database was down when its replicas ended."""
        deadline = time.monotonic() + knobs.STORE_RETRY_SECONDS.value()
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
                self.store().update_replica(self.id, r.name, state=state, finished_at=now)
        self.store().update_experiment(self.id, status=outcome.status, reason=outcome.reason, finished_at=now)
        if self.notify:
            notify(self.notify)
        self.observer.states({n: s.state for n, s in self.states.items()}, self.elapsed())


def notify(fifo: str) -> None:
    """One byte into the FIFO a watcher waits on (a group's controller); nobody reading (the
    controller is gone: ENXIO) or a full pipe (it has been woken already) is fine."""
    try:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        return
    try:
        os.write(fd, b".")
    except OSError:
        pass
    finally:
        os.close(fd)


def _short(exc: BaseException) -> str:
    """An exception in one line (a database driver's message can run over many)."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text[:200]}" if text else type(exc).__name__


def _unfinished_state(outcome: Outcome) -> ReplicaState:
    return ReplicaState.SUCCEEDED if outcome.status is ExperimentStatus.SUCCEEDED else ReplicaState.STOPPED
