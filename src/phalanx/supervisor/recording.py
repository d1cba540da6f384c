"""What the supervisor records: replica states and rows, console lines (shown and spooled), the
launch's params, and the outcome, kept in the spool when the store cannot be reached.

Functions of ``Supervisor`` (its methods, bound in its class body: ``_x = module._x``), kept here
so that each module of the supervisor has one job."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from typing import TYPE_CHECKING, Any

from phalanx import knobs
from phalanx.backends.base import JobStatus
from phalanx.domain import ExperimentStatus, Replica, ReplicaState
from phalanx.supervisor.outcome import Outcome

if TYPE_CHECKING:
    from phalanx.supervisor.supervising import Supervisor

log = logging.getLogger(__name__)


def _record(self: Supervisor, job: JobStatus) -> None:
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


def _record_rows(self: Supervisor, job: JobStatus) -> None:
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


def _line(self: Supervisor, replica: Replica, text: str) -> None:
    """A supervisor note in a replica's console: spooled (after what the replica printed
    before it), then shown."""
    tail = self.tails.get(replica.name)
    if tail is not None:
        tail.flush()
    self._spool_lines(replica, [text])
    self._show(replica, text)


def _show(self: Supervisor, replica: Replica, text: str) -> None:
    if self.liveness is not None:
        self.liveness.output(replica.name)
    self.observer.line(replica.name, text)


def _spool_lines(self: Supervisor, replica: Replica, lines: list[str], stream: str = "stdout") -> None:
    # ValueError: the writer closed under a late line at shutdown (a stuck reader given up on);
    # OSError: the disk is full. The lines still reach the terminal; the outcome counts them.
    try:
        self._spool.write(
            "log",
            {"stream": stream, "lines": lines},
            replica=replica.name,
            role=str(replica.role),
            index=replica.index,
            rank=replica.rank,
        )
    except (ValueError, OSError):
        self.lost_lines += len(lines)


def _flush_tails(self: Supervisor) -> None:
    for tail in list(self.tails.values()):
        tail.flush()


def _record_launch_params(self: Supervisor) -> None:
    """The declared params (the file's, after `--param`; a trial's sampled values included) as
    tracked params (PARAM event of the first replica, rank 0 where there is one), once per
    experiment: a resume has them already."""
    params = dict(self.p.plan.params)
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


def _emit_all(self: Supervisor, text: str) -> None:
    """A supervisor note in the console of every replica (restarts, servers stopped)."""
    for replica in self.replicas.values():
        self._line(replica, text)


def _tidy(self: Supervisor, ingested: bool) -> None:
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


def _finish(self: Supervisor, outcome: Outcome) -> None:
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


def _outcome_to_spool(self: Supervisor, outcome: Outcome) -> None:
    """The outcome as STATUS events (one per replica, each with its own final state), which
    ingest applies like any other record, exactly once."""
    from phalanx.spool import SpoolWriter

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


def _write_outcome(self: Supervisor, outcome: Outcome) -> None:
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
    if self.notify:
        notify(self.notify)
    self.observer.states({n: s.state for n, s in self.states.items()}, time.monotonic() - self.started)


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
