"""The Slurm engine: a Plan becomes one sbatch job (heterogeneous when replicas' resources differ).

``dry_run`` renders the script (``slurm_script``); ``submit`` writes it into the experiment's run folder
and runs ``sbatch --parsable``. Replicas write their console to ``<run>/logs/<replica>.log`` and their
node and exit code to ``<run>/state/`` (a folder every node sees: the cluster's ``shared_dir``, or
PHALANX_HOME's runs folder on a one-machine cluster), so ``describe`` and ``logs`` work from any
process. The job's state comes from ``scontrol show job`` (this engine assumes no accounting
database, so no ``sacct``), mapped through ``JOB_STATES``. ``srun --kill-on-bad-exit=1`` is the gang
rule: one task failing kills the others and fails the job. The handle is ``<job id>:<run folder>``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from phalanx.backends.base import DryRun, JobStatus, LaunchContext, ReplicaStatus, expect_dry_run
from phalanx.backends.dry_runs import SlurmDryRun
from phalanx.backends.logfiles import follow_file
from phalanx.backends.slurm_script import layout, render
from phalanx.clusters import Cluster
from phalanx.config import Settings
from phalanx.domain import ExperimentStatus, ReplicaState
from phalanx.errors import BackendUnavailable, NotFound
from phalanx.plan import Plan

log = logging.getLogger(__name__)

# Slurm job state (scontrol's JobState, squeue's %T) -> experiment status. Anything else: UNKNOWN.
JOB_STATES: dict[str, ExperimentStatus] = {
    "PENDING": ExperimentStatus.STARTING,  # queued, waiting for resources or priority
    "CONFIGURING": ExperimentStatus.STARTING,  # nodes allocated, being readied
    "REQUEUED": ExperimentStatus.STARTING,  # put back in the queue; it will start again
    "REQUEUE_HOLD": ExperimentStatus.STARTING,
    "REQUEUE_FED": ExperimentStatus.STARTING,
    "RUNNING": ExperimentStatus.RUNNING,
    "COMPLETING": ExperimentStatus.RUNNING,  # processes ending; the final state follows
    "SIGNALING": ExperimentStatus.RUNNING,
    "STAGE_OUT": ExperimentStatus.RUNNING,
    "RESIZING": ExperimentStatus.RUNNING,
    "SUSPENDED": ExperimentStatus.RUNNING,  # paused by an admin; it resumes where it was
    "STOPPED": ExperimentStatus.RUNNING,  # SIGSTOPped; the allocation is kept
    "COMPLETED": ExperimentStatus.SUCCEEDED,  # every task exited 0
    "FAILED": ExperimentStatus.FAILED,  # a task exited non-zero (the gang rule stopped the rest)
    "TIMEOUT": ExperimentStatus.FAILED,  # ran past --time (max_run_seconds)
    "OUT_OF_MEMORY": ExperimentStatus.FAILED,
    "NODE_FAIL": ExperimentStatus.FAILED,
    "BOOT_FAIL": ExperimentStatus.FAILED,
    "DEADLINE": ExperimentStatus.FAILED,
    "PREEMPTED": ExperimentStatus.FAILED,
    "SPECIAL_EXIT": ExperimentStatus.FAILED,
    "CANCELLED": ExperimentStatus.STOPPED,  # scancel (phalanx stop) or an admin
    "REVOKED": ExperimentStatus.STOPPED,  # a federated sibling started elsewhere
}

_REASONS = {
    "TIMEOUT": "ran past its time limit (max_run_seconds)",
    "OUT_OF_MEMORY": "a task ran out of memory",
    "NODE_FAIL": "a node failed",
    "CANCELLED": "cancelled",
    "PREEMPTED": "preempted",
}

_KV = re.compile(r"(\w[\w/:]*)=(\S*)")


def status_of(job_state: str) -> ExperimentStatus:
    """Map scontrol's JobState ("CANCELLED by 0" reads as CANCELLED) through JOB_STATES."""
    return JOB_STATES.get(job_state.split()[0].upper() if job_state else "", ExperimentStatus.UNKNOWN)


class SlurmBackend:
    """Runs a Plan as an sbatch job on a Slurm cluster (``slurm_conf`` picks a private one)."""

    name = "slurm"

    def __init__(self, cluster: Cluster | None = None, settings: Settings | None = None) -> None:
        self.cluster = cluster or Cluster(name="slurm", kind="slurm")
        self.settings = settings or Settings()

    # -- commands -------------------------------------------------------------------------------
    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.cluster.slurm_conf:
            env["SLURM_CONF"] = self.cluster.slurm_conf
        return env

    def _cmd(self, argv: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
        if shutil.which(argv[0]) is None:
            raise BackendUnavailable(
                f"{argv[0]} was not found: install Slurm's client (apt-get install slurm-client)"
            )
        try:
            proc = subprocess.run(argv, env=self._env(), capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired as exc:
            raise BackendUnavailable(f"{' '.join(argv)} did not answer in 60 s: is slurmctld up?") from exc
        if check and proc.returncode != 0:
            raise BackendUnavailable(f"{' '.join(argv)} failed: {proc.stderr.strip() or proc.stdout.strip()}")
        return proc

    # -- dry run --------------------------------------------------------------------------------
    def run_dir(self, experiment_id: str) -> Path:
        if self.cluster.shared_dir:
            return Path(self.cluster.shared_dir) / experiment_id
        return self.settings.runs_dir / experiment_id / "slurm"

    def dry_run(self, plan: Plan, context: LaunchContext) -> DryRun:
        env: dict[str, str] = {**plan.build.env_vars, **plan.env, **context.tracking_env}
        env["PHALANX_CAPTURED"] = "1"  # the task wrapper writes the console to the replica's log file
        if self.cluster.server_url:
            env["PHALANX_HOST"] = self.cluster.server_url
        env.setdefault("PYTHONUNBUFFERED", "1")
        env["PATH"] = f"{Path(context.python).parent}:$PATH"
        script = render(
            plan,
            context.experiment_id,
            context.workdir,
            self.run_dir(context.experiment_id),
            env,
            partition=self.cluster.partition,
        )
        return SlurmDryRun(backend=self.name, plan=plan, context=context, script=script)

    # -- submit ---------------------------------------------------------------------------------
    def submit(self, dry_run: DryRun) -> str:
        run_dir = self.run_dir(dry_run.context.experiment_id)
        first = not run_dir.exists()
        try:
            self._archive_previous_attempt(run_dir)
            (run_dir / "logs").mkdir(parents=True, exist_ok=True)
            (run_dir / "state").mkdir(parents=True, exist_ok=True)
            script = run_dir / "job.sbatch"
            script.write_text(expect_dry_run(dry_run, SlurmDryRun, self.name).script)
            keys = [t.key for c in layout(dry_run.plan) for t in c.tasks]
            (run_dir / "tasks").write_text("\n".join(keys) + "\n")
            out = self._cmd(["sbatch", "--parsable", str(script)]).stdout.strip()
            job_id = out.split(";")[0]
            if not job_id.isdigit():
                raise BackendUnavailable(f"sbatch answered {out!r}, not a job id")
        except BaseException:
            if first:  # Slurm took nothing: leave no folder for an experiment that never existed
                shutil.rmtree(run_dir, ignore_errors=True)
            raise
        log.info("submitted %s as Slurm job %s", dry_run.context.experiment_id, job_id)
        return f"{job_id}:{run_dir}"

    @staticmethod
    def _archive_previous_attempt(run_dir: Path) -> None:
        """A restart (max_restarts) submits again into the same folder: move the last attempt's logs
        and state under attempts/<n>/, so this attempt starts clean and nothing is read twice."""
        leftovers = [run_dir / n for n in ("logs", "state", "cancelled", "tasks") if (run_dir / n).exists()]
        if not leftovers:
            return
        attempts = run_dir / "attempts"
        attempts.mkdir(exist_ok=True)
        target = attempts / str(len(list(attempts.iterdir())))
        target.mkdir()
        for path in leftovers:
            path.rename(target / path.name)

    @staticmethod
    def _split(handle: str) -> tuple[str, Path]:
        job_id, sep, run_dir = handle.partition(":")
        if not sep or not job_id.isdigit():
            raise NotFound(f"{handle!r} is not a Slurm handle (<job id>:<run folder>)")
        return job_id, Path(run_dir)

    # -- state ----------------------------------------------------------------------------------
    def _job(self, job_id: str) -> dict[str, str] | None:
        """The job's scontrol record (a heterogeneous job's leader), or None once Slurm forgot it."""
        proc = self._cmd(["scontrol", "show", "job", "-o", job_id], check=False)
        if proc.returncode != 0:
            if "Invalid job id" in proc.stderr:
                return None
            raise BackendUnavailable(f"scontrol show job {job_id} failed: {proc.stderr.strip()}")
        first = proc.stdout.strip().splitlines()[0] if proc.stdout.strip() else ""
        return dict(_KV.findall(first)) if first else None

    @staticmethod
    def _tasks(run_dir: Path) -> list[str]:
        try:
            return [k for k in (run_dir / "tasks").read_text().split() if k]
        except OSError:
            return []

    @staticmethod
    def _read(path: Path) -> str | None:
        try:
            return path.read_text().strip()
        except OSError:
            return None

    def _replicas(self, run_dir: Path, job_status: ExperimentStatus | None) -> list[ReplicaStatus]:
        """Each replica from its tasks' state files: node at start, exit code (or "stopped") at end."""
        by_replica: dict[str, list[tuple[str | None, str | None, float | None]]] = {}
        for key in self._tasks(run_dir):
            folder = run_dir / "state"
            exit_text = self._read(folder / f"{key}.exit")
            finished = None
            if exit_text is not None:
                with contextlib.suppress(OSError):
                    finished = (folder / f"{key}.exit").stat().st_mtime
            by_replica.setdefault(key.split(".")[0], []).append(
                (self._read(folder / f"{key}.node"), exit_text, finished)
            )
        ended = job_status is None or job_status.done
        out = []
        for name, tasks in by_replica.items():
            host = next((n for n, _, _ in tasks if n), None)
            exits = [e for _, e, _ in tasks]
            finished = max((f for _, _, f in tasks if f), default=None)
            bad = [e for e in exits if e not in (None, "0", "stopped")]
            code: int | None = None
            reason = None
            if bad:
                state, code = ReplicaState.FAILED, int(bad[0]) if bad[0].lstrip("-").isdigit() else None
                reason = f"exited with code {code}" if code is not None and code < 128 else None
                if code is not None and code > 128:
                    reason = f"was killed by signal {code - 128}"
            elif exits and all(e == "0" for e in exits):
                state, code = ReplicaState.SUCCEEDED, 0
            elif "stopped" in exits or (ended and any(n for n, _, _ in tasks)):
                state, reason = ReplicaState.STOPPED, "stopped when the job ended"
            elif any(n for n, _, _ in tasks):
                state = ReplicaState.RUNNING
            elif ended:
                state, reason = ReplicaState.STOPPED, "never started"
            elif job_status is ExperimentStatus.RUNNING:
                state = ReplicaState.STARTING
            else:
                state = ReplicaState.PENDING
            out.append(
                ReplicaStatus(name, state, host=host, exit_code=code, reason=reason, finished_at=finished)
            )
        return self._stopped_not_failed(run_dir, out)

    @staticmethod
    def _stopped_not_failed(run_dir: Path, replicas: list[ReplicaStatus]) -> list[ReplicaStatus]:
        """Tell the replicas Slurm killed from the one that failed.

        Slurm signals every task of a step when srun's gang rule fires or on scancel, and a killed
        task cannot tell that apart from any other death by signal. So a replica killed by a signal
        after the first failure, or after ``cancel``, was stopped, not failed.
        """
        cancelled: float | None = None
        with contextlib.suppress(OSError):
            cancelled = (run_dir / "cancelled").stat().st_mtime
        failed = [r for r in replicas if r.state is ReplicaState.FAILED and r.finished_at is not None]
        first = min(failed, key=lambda r: r.finished_at or 0) if failed else None
        out = []
        for r in replicas:
            killed = r.state is ReplicaState.FAILED and (r.exit_code or 0) > 128 and r.finished_at
            if killed and cancelled is not None and (r.finished_at or 0) > cancelled:
                r = replace(r, state=ReplicaState.STOPPED, reason="stopped by scancel")
            elif killed and first is not None and r is not first:
                r = replace(r, state=ReplicaState.STOPPED, reason=f"stopped after {first.name} failed")
            out.append(r)
        return out

    def describe(self, handle: str) -> JobStatus | None:
        job_id, run_dir = self._split(handle)
        job = self._job(job_id)
        if job is None:
            # Slurm forgot the job (MinJobAge); the state files still tell how it ended, if they do.
            replicas = self._replicas(run_dir, None)
            if not replicas or not all(r.state.done for r in replicas):
                return None
            failed = [r for r in replicas if r.state is ReplicaState.FAILED]
            if failed:
                return JobStatus(
                    ExperimentStatus.FAILED, tuple(replicas), f"{failed[0].name} {failed[0].reason}"
                )
            if all(r.state is ReplicaState.SUCCEEDED for r in replicas):
                return JobStatus(ExperimentStatus.SUCCEEDED, tuple(replicas))
            return JobStatus(ExperimentStatus.STOPPED, tuple(replicas), "stopped")
        native = job.get("JobState", "")
        status = status_of(native)
        replicas = self._replicas(run_dir, status)
        reason = None
        if status is ExperimentStatus.FAILED:
            failed = sorted(
                (r for r in replicas if r.state is ReplicaState.FAILED), key=lambda r: r.finished_at or 0
            )
            culprit = f"{failed[0].name} {failed[0].reason}" if failed else None
            reason = _REASONS.get(native) or culprit or f"Slurm job state {native}"
        elif status is ExperimentStatus.STOPPED:
            reason = _REASONS.get(native, native.lower())
        elif status is ExperimentStatus.UNKNOWN:
            reason = f"Slurm job state {native!r}"
        elif status is ExperimentStatus.STARTING and job.get("Reason") not in (None, "None"):
            reason = f"pending: {job['Reason']}"
        return JobStatus(status, tuple(replicas), reason)

    # -- logs -----------------------------------------------------------------------------------
    def logs(self, handle: str, replica: str, follow: bool = False) -> Iterator[str]:
        """Lines of a replica's console (its first process); with follow, until the job has ended."""
        _, run_dir = self._split(handle)
        path = run_dir / "logs" / f"{replica}.log"
        last_check = 0.0
        done = False

        def ended() -> bool:  # asks slurmctld at most once a second
            nonlocal last_check, done
            if time.monotonic() - last_check > 1.0:
                last_check = time.monotonic()
                try:
                    status = self.describe(handle)
                    done = status is None or status.status.done
                except BackendUnavailable:
                    log.warning("slurmctld did not answer; still following %s", path)
            return done

        yield from follow_file(path, 0, ended if follow else None, poll=0.2)

    # -- cancel ---------------------------------------------------------------------------------
    def cancel(self, handle: str) -> None:
        """scancel the job; cancelling a finished or forgotten job is a no-op."""
        job_id, run_dir = self._split(handle)
        if run_dir.is_dir() and not (run_dir / "cancelled").exists():
            (run_dir / "cancelled").touch()  # replicas killed from now on were stopped, not failed
        proc = self._cmd(["scancel", job_id], check=False)
        if proc.returncode != 0 and "Invalid job id" not in proc.stderr and "already" not in proc.stderr:
            raise BackendUnavailable(f"scancel {job_id} failed: {proc.stderr.strip()}")


def create(cluster: Cluster | None = None, settings: Settings | None = None) -> SlurmBackend:
    """The registry's entry point: a Slurm backend for a named cluster."""
    return SlurmBackend(cluster, settings)
