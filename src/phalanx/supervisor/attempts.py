"""The experiment's attempts: `phalanx resume` reopening it, the numbers of its attempts in the store
(a start, a restart, a resume, the engine's own requeue), what each attempt runs (repro records),
and the checkpoint a new group continues from."""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from phalanx import repro
from phalanx.backends.base import Backend, JobStatus, LaunchContext
from phalanx.backends.local.boxes import helper_argv
from phalanx.domain import ExperimentStatus
from phalanx.errors import BackendUnavailable, not_resumable
from phalanx.ingest import Ingester
from phalanx.machine.procs import own_output_files, record_process
from phalanx.supervisor.outcome import PID_FILE

if TYPE_CHECKING:
    from phalanx.store.run_store import RunStore
    from phalanx.supervisor.console import Console
    from phalanx.supervisor.opener import LazyStore
    from phalanx.supervisor.outcome import Observer
    from phalanx.supervisor.preparing import Prepared

log = logging.getLogger(__name__)


class Attempts:
    """``run_dir``/``spool_dir``: the experiment's folders; ``cache``: the home's cache folder
    (what repro keeps between runs); ``backend``: its engine (whose requeues
    are followed); ``console``: where notes for every replica go. ``number``: the store's number of
    the attempt running now; ``resume_step``: the checkpoint step the next group continues from."""

    def __init__(
        self,
        experiment_id: str,
        store: LazyStore,
        backend: Backend,
        console: Console,
        observer: Observer,
        *,
        run_dir: Path,
        spool_dir: Path,
        cache: Path | None = None,
    ) -> None:
        self.id = experiment_id
        self.store = store
        self.backend = backend
        self.console = console
        self.observer = observer
        self.run_dir = run_dir
        self.spool_dir = spool_dir
        self.cache = cache  # $PHALANX_HOME/cache: the interpreter's package list between runs
        self.number: int | None = None
        self.resume_step: int | None = None
        self._repro: threading.Thread | None = None

    # -- `phalanx resume` --------------------------------------------------------------------------
    def reopen(self) -> None:
        """`phalanx resume`: the failed or stopped experiment runs again (before it may queue).

        Two resumes of one experiment race: under a lock, each reads the status first, so a loser
        (the winner reopened it already) leaves the pid file alone: a `phalanx resume -d` watching
        that file for its own pid never takes the winner's reopen for its own. The winner's pid
        file names it before its reopen commits (no reader ever sees the experiment starting with a
        dead supervisor recorded); should the reopen still fail, what the file said is put back."""
        store = self.store()
        pid_file = self.run_dir / PID_FILE
        with open(self.run_dir / "resume.lock", "a+b") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes (or we die)
            current = store.get_experiment(self.id)
            if not current.status.resumable:
                raise not_resumable(current.id, current.status)
            try:
                before = pid_file.read_bytes()
            except FileNotFoundError:
                before = None
            record_process(pid_file)
            try:
                store.reopen_experiment(self.id)
            except BaseException:
                if before is None:
                    pid_file.unlink(missing_ok=True)
                else:  # atomically, as record_process writes it: a reader never sees half
                    tmp = pid_file.with_name(f"{PID_FILE}.{os.getpid()}.tmp")
                    tmp.write_bytes(before)
                    os.replace(tmp, pid_file)
                raise
        # the stop request that ended the last attempt is spent: this is a new one
        with contextlib.suppress(FileNotFoundError):
            (self.run_dir / "stop").unlink()

    # -- what each attempt runs --------------------------------------------------------------------
    def start_repro(
        self, prepared: Prepared, attempt: int | None = None, started_ns: int | None = None
    ) -> None:
        """Record what runs (phalanx.repro) in a thread: the replicas do not wait for git or pip.
        It writes once the store is ready (``LazyStore.ready``), and not at all if it never opened.
        ``started_ns``: when the replicas started (default: now), after which what changes in the
        folder is their output, not code.

        ``attempt``: a later attempt of the experiment (`phalanx resume`), whose folder may hold
        edited code. Its record becomes the experiment's (what produced its latest result), its
        snapshot is stored beside the earlier ones, and every attempt's record is kept in order
        under ``attempts`` (repro.with_attempt), for `phalanx get`, `diff ID` and `rerun --attempt`."""
        launch = dict(prepared.launch or {})
        launch.setdefault("workdir", prepared.context.workdir)
        launch.setdefault("cluster", prepared.cluster)
        workdir, python = prepared.context.workdir, prepared.context.python
        box = helper_argv(prepared.context)  # a box's folder and venv: git and python run boxed
        started_ns = time.time_ns() if started_ns is None else started_ns
        own_output = own_output_files()  # `phalanx run ... > run.log` in the folder

        def work() -> None:
            try:
                record, data = repro.collect(
                    workdir=workdir,
                    python=python,
                    launch=launch,
                    box=box,
                    cache=self.cache,
                    since_ns=started_ns,
                    own_output=own_output,
                )
            except OSError as exc:  # its folder gone or unreadable: said in a line
                log.warning("recording what the experiment runs failed (%s)", exc)
                return
            except Exception:
                log.exception("recording what the experiment runs failed")
                return
            store = self.store.wait_ready()
            if store is None:
                return
            try:
                self._store_repro(store, record, data, launch, attempt)
            except (BackendUnavailable, OSError) as exc:  # an outage, a full disk: said in a line
                log.warning("what the experiment runs could not be stored (%s)", exc)
            except Exception:
                log.exception("storing what the experiment runs failed")

        self._repro = threading.Thread(target=work, name="repro", daemon=True)
        self._repro.start()

    def _store_repro(
        self,
        store: RunStore,
        record: dict[str, Any],
        data: bytes,
        launch: dict[str, Any],
        attempt: int | None,
    ) -> None:
        original = launch.get("rerun_of")
        if original and not record.get("git"):
            # a rerun runs an unpacked snapshot (no work tree): the code is the original's,
            # so is its commit and uncommitted diff (`from` names where it came from)
            git = (store.repro(original) or {}).get("git")
            if git:
                record["git"] = {**git, "from": original}
        artifacts = store.artifact_store
        path = repro.snapshot_path(attempt)
        if artifacts is not None:
            artifacts.put_bytes(self.id, path, data)
            record["snapshot"] = {**record["snapshot"], "path": path}
        else:
            record["snapshot"] = {**record["snapshot"], "path": None}
        if attempt is not None:
            record = repro.with_attempt(store.repro(self.id), record, attempt)
        store.set_repro(self.id, record)

    def join_repro(self) -> None:
        """At the end: the repro record written (also when the store never opened: it then ends)."""
        if self._repro is not None:
            self.store.ready()
            self._repro.join(timeout=120)

    # -- the store's attempts ----------------------------------------------------------------------
    def add(self, kind: str) -> int | None:
        """A new attempt (start, restart, resume, requeue) in the store; now the running one."""
        try:
            self.number = int(self.store().add_attempt(self.id, kind=kind, checkpoint_step=self.resume_step))
        except Exception:
            log.exception("recording the attempt failed")
            self.number = None
        return self.number

    def finish(self, number: int | None, status: ExperimentStatus, reason: str | None) -> None:
        if number is None:
            return
        with contextlib.suppress(Exception):
            self.store().finish_attempt(self.id, number, status=status, reason=reason)

    def follow_requeue(self, job: JobStatus) -> None:
        """The engine started the job again by itself (a Slurm requeue after a node failure,
        preemption or `scontrol requeue`): the attempt it runs now is recorded as a new one, so the
        attempts in `phalanx get` match the numbers the tasks report their points with."""
        while job.attempt is not None and self.number is not None and job.attempt > self.number:
            why = f"requeued by {self.backend.name}"
            self.finish(self.number, ExperimentStatus.FAILED, why)
            self.add("requeue")
            self.observer.message(f"{why}; attempt {self.number} starts")
            self.console.emit_all(f"phalanx: {why}; attempt {self.number} starts")

    # -- where a new group continues from ----------------------------------------------------------
    def resume_context(self, context: LaunchContext) -> LaunchContext:
        """The launch context of a new group: PHALANX_RESUME_CHECKPOINT / _STEP / _METRICS name the
        experiment's latest checkpoint (what ``task.latest_checkpoint()`` returns), once everything
        the failed group wrote to the spool is in the store."""
        store = self.store()
        with contextlib.suppress(Exception):  # the ingest thread does the same work: this only hurries it
            Ingester(store, None, self.spool_dir, cleanup=False, claimed=True).run_once()
        context = self.with_attempt(context)
        self.resume_step = None
        try:
            from phalanx import checkpoints  # why: a restart only: a run that never fails reads none

            ckpt = checkpoints.latest(checkpoints.from_artifacts(store.artifacts(self.id)))
        except Exception:
            log.exception("looking up the latest checkpoint failed; restarting from scratch")
            return context
        if ckpt is None:
            return context
        path = self._local_checkpoint(ckpt.path)
        if path is None:
            return context
        self.resume_step = ckpt.step
        self.console.emit_all(f"phalanx: continuing from checkpoint step {ckpt.step} ({ckpt.name})")
        env = {
            checkpoints.ENV_RESUME: path,
            checkpoints.ENV_RESUME_STEP: str(ckpt.step),
            "PHALANX_RESUME_METRICS": json.dumps(dict(ckpt.metrics)),
        }
        return replace(context, tracking_env={**context.tracking_env, **env})

    def with_attempt(self, context: LaunchContext) -> LaunchContext:
        """PHALANX_ATTEMPT: the number the next group's attempt gets in the store, so its points
        replace the steps earlier attempts reported (store.sql.attempts) instead of repeating them."""
        try:
            numbers = [int(a["number"]) for a in self.store().attempts(self.id)]
        except Exception:
            log.exception("reading the attempts failed; the new group's points are appended")
            return context
        env = {**context.tracking_env, "PHALANX_ATTEMPT": str(max(numbers, default=-1) + 1)}
        return replace(context, tracking_env=env)

    def _local_checkpoint(self, path: str) -> str | None:
        """A local path of a stored checkpoint: where the artifact store keeps it when that is a
        folder here, else a copy downloaded under the run folder."""
        artifacts = self.store().artifact_store
        if artifacts is None:
            return None
        if artifacts.local:
            return str(artifacts.url(self.id, path))
        return str(artifacts.download(self.id, path, self.run_dir / "resume"))
