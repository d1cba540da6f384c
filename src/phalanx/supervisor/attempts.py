"""The supervisor's attempts: `phalanx resume` reopening an experiment, what each attempt runs
(repro records), the engine's own requeues, and the checkpoint an attempt resumes from.

Functions of ``Supervisor`` (its methods, bound in its class body: ``_x = module._x``), kept here
so that each module of the supervisor has one job."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from dataclasses import replace
from typing import TYPE_CHECKING

from phalanx.backends.base import JobStatus, LaunchContext
from phalanx.backends.local.boxes import helper_argv
from phalanx.domain import ExperimentStatus
from phalanx.supervisor.outcome import PID_FILE, Outcome

if TYPE_CHECKING:
    from phalanx.supervisor.supervising import Supervisor

log = logging.getLogger(__name__)


def _reopen(self: Supervisor) -> None:
    """`phalanx resume`: the failed or stopped experiment runs again (before it may queue).

    Two resumes of one experiment race: under a lock, each reads the status first, so a loser
    (the winner reopened it already) leaves the pid file alone: a `phalanx resume -d` watching
    that file for its own pid never takes the winner's reopen for its own. The winner's pid
    file names it before its reopen commits (no reader ever sees the experiment starting with a
    dead supervisor recorded); should the reopen still fail, what the file said is put back."""
    import fcntl

    from phalanx.errors import not_resumable
    from phalanx.machine.procs import record_process

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


def _start_resumed(self: Supervisor) -> str | None:
    """`phalanx resume`: start a group from the reopened experiment's latest checkpoint."""
    if self._stop_requested():
        return None
    context = self._resume_context()
    handle = self._submit(self.p.backend.dry_run(self.p.plan, context))
    attempt = context.tracking_env.get("PHALANX_ATTEMPT")
    self._start_repro(attempt=int(attempt) if attempt else None)  # the code may have been edited
    self._start_system_metrics()
    return handle


def _start_repro(self: Supervisor, attempt: int | None = None) -> None:
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
                workdir=self.p.context.workdir,
                python=self.p.context.python,
                launch=launch,
                box=helper_argv(self.p.context),  # a box's folder and venv: git and python run boxed
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


def _attempts(self: Supervisor, handle: str | None) -> Outcome:
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


def _add_attempt(self: Supervisor, kind: str) -> int | None:
    add = getattr(self.store, "add_attempt", None)
    if add is None:
        return None
    try:
        return int(add(self.id, kind=kind, checkpoint_step=self._resume_step))
    except Exception:
        log.exception("recording the attempt failed")
        return None


def _follow_requeue(self: Supervisor, job: JobStatus) -> None:
    """The engine started the job again by itself (a Slurm requeue after a node failure,
    preemption or `scontrol requeue`): the attempt it runs now is recorded as a new one, so the
    attempts in `phalanx get` match the numbers the tasks report their points with."""
    while job.attempt is not None and self._attempt_no is not None and job.attempt > self._attempt_no:
        why = f"requeued by {self.p.backend.name}"
        self._finish_attempt(self._attempt_no, ExperimentStatus.FAILED, why)
        self._attempt_no = self._add_attempt("requeue")
        self.observer.message(f"{why}; attempt {self._attempt_no} starts")
        self._emit_all(f"phalanx: {why}; attempt {self._attempt_no} starts")


def _finish_attempt(
    self: Supervisor, number: int | None, status: ExperimentStatus, reason: str | None
) -> None:
    finish = getattr(self.store, "finish_attempt", None)
    if number is None or finish is None:
        return
    with contextlib.suppress(Exception):
        finish(self.id, number, status=status, reason=reason)


def _resume_context(self: Supervisor) -> LaunchContext:
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


def _with_attempt(self: Supervisor, context: LaunchContext) -> LaunchContext:
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


def _local_checkpoint(self: Supervisor, path: str) -> str | None:
    """A local path of a stored checkpoint: where the artifact store keeps it when that is a
    folder here, else a copy downloaded under the run folder."""
    artifacts = getattr(self.store, "artifact_store", None)
    if artifacts is None:
        return None
    if artifacts.local:
        return str(artifacts.url(self.id, path))
    return str(artifacts.download(self.id, path, self.run_dir / "resume"))
