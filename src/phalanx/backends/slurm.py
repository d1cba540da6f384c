"""The Slurm engine: a Plan becomes one sbatch job (heterogeneous when replicas' resources differ).

``dry_run`` renders the script (``slurm_script``); ``submit`` writes it into the experiment's run folder
and runs ``sbatch --parsable``. Replicas write their console to ``<run>/logs/<replica>.log`` and their
node and exit code to ``<run>/state/`` (a folder every node sees: the cluster's ``shared_dir``, or
PHALANX_HOME's runs folder on a one-machine cluster), so ``describe`` and ``logs`` work from any
process. The job's state comes from one ``squeue`` per poll interval shared by every experiment
(``slurm_queue``; this engine assumes no accounting database, so no ``sacct``), mapped through
``JOB_STATES``; ``scontrol show job`` only once Slurm has dropped a job from squeue.
``srun --kill-on-bad-exit=1`` is the gang rule: one task failing kills the others and fails the job.
The handle is ``<job id>:<run folder>``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

from phalanx.backends import slurm_box
from phalanx.backends.base import DryRun, JobStatus, LaunchContext, ReplicaStatus, expect_dry_run
from phalanx.backends.dry_runs import SlurmDryRun
from phalanx.backends.slurm_logs import LogFile
from phalanx.backends.slurm_queue import SlurmQueue, queue_for
from phalanx.backends.slurm_script import TOKEN_FILE, TOKEN_VARIABLE, NodeFetch, layout, render
from phalanx.clusters import Cluster
from phalanx.config import Settings
from phalanx.domain import ExperimentStatus, ReplicaState
from phalanx.errors import BackendUnavailable, NotFound, UsageError
from phalanx.frameworks import uses_mpi
from phalanx.machine.box import (
    Isolation,
    folders_inside,
    read_inside,
    remove_inside,
    write_new,
)
from phalanx.plan import Plan

log = logging.getLogger(__name__)

# Slurm job state (scontrol's JobState, squeue's %T) -> experiment status. Anything else: UNKNOWN.
JOB_STATES: dict[str, ExperimentStatus] = {
    "PENDING": ExperimentStatus.PENDING,  # queued, waiting for resources or priority (Reason says)
    "CONFIGURING": ExperimentStatus.STARTING,  # nodes allocated, being readied
    "REQUEUED": ExperimentStatus.PENDING,  # put back in the queue; it will start again
    "REQUEUE_HOLD": ExperimentStatus.PENDING,
    "REQUEUE_FED": ExperimentStatus.PENDING,
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

# Pending reasons that mean the job can never start as submitted (it asks for more than the partition
# has, or for something no node offers): it is refused, not left waiting forever.
NEVER_REASONS = {
    "PartitionConfig": "it asks for more than the partition has (tasks x cpus-per-task, memory, gpus)",
    "PartitionNodeLimit": "it needs more nodes than the partition allows",
    "PartitionTimeLimit": "its --time (max_run_seconds) is above the partition's limit",
    "BadConstraints": "no node has what it asks for",
    "ReqNodeNotAvail": "a node it needs is not available",
    "InvalidQOS": "its QOS is invalid",
    "InvalidAccount": "its account is invalid",
}
MPI_PREFERENCE = ("pmix", "pmi2")  # Debian's Open MPI aborts in MPI_Init under pmi2; pmix works
MAX_ATTEMPTS = 100  # attempts/ is the job's: a million folders there are not a million requeues
JOB_FILE_MAX_BYTES = 1 << 20  # the most read of a file the job writes (its tasks, its state files)

_KV = re.compile(r"(\w[\w/:]*)=(\S*)")
_TASK_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*(\.[0-9]+)?")  # a replica's name, .N for its process N


def node_fetch(context: LaunchContext) -> NodeFetch | None:
    """The inputs each node fetches for itself, run by this Phalanx (interpreter and package folder)."""
    if not context.input_fetches:
        return None

    return NodeFetch(
        orders=tuple(context.input_fetches),
        python=sys.executable,
        # the folder holding the phalanx package (this file is phalanx/backends/slurm.py)
        pythonpath=str(Path(__file__).resolve().parents[2]),
        cache=os.environ.get("PHALANX_NODE_CACHE") or None,
    )


def status_of(job_state: str) -> ExperimentStatus:
    """Map scontrol's JobState ("CANCELLED by 0" reads as CANCELLED) through JOB_STATES."""
    return JOB_STATES.get(job_state.split()[0].upper() if job_state else "", ExperimentStatus.UNKNOWN)


class SlurmBackend:
    """Runs a Plan as an sbatch job on a Slurm cluster (``slurm_conf`` picks a private one)."""

    name = "slurm"
    restarts_itself = False  # a requeue is Slurm's own attempt (followed), not a restart

    def __init__(self, cluster: Cluster | None = None, settings: Settings | None = None) -> None:
        self.cluster = cluster or Cluster(name="slurm", kind="slurm")
        self.settings = settings or Settings()
        self._submitted: dict[str, float] = {}  # job id -> when sbatch answered

    @property
    def queue(self) -> SlurmQueue:
        """The process-wide squeue snapshot of this cluster (one query per interval for all jobs)."""
        return queue_for(self.cluster.slurm_conf or os.environ.get("SLURM_CONF", ""), self._cmd)

    def mpi_plugin(self) -> str:
        """The MPI plugin to launch ranks with: the first of MPI_PREFERENCE the cluster offers
        (``srun --mpi=list``), pmix when srun cannot be asked (a dry run on a machine without Slurm)."""
        key = self.cluster.slurm_conf or os.environ.get("SLURM_CONF", "")
        if key in _MPI_PLUGINS:
            return _MPI_PLUGINS[key]
        if shutil.which("srun") is None:
            return MPI_PREFERENCE[0]
        proc = self._cmd(["srun", "--mpi=list"], check=False)
        offered = set(re.findall(r"^\s*(?:srun: )?(\w+)\s*$", proc.stdout + proc.stderr, re.M))
        if proc.returncode != 0 or not offered:
            return MPI_PREFERENCE[0]  # srun could not say (no slurm.conf here): not remembered
        chosen = next((p for p in MPI_PREFERENCE if p in offered), "none")
        _MPI_PLUGINS[key] = chosen
        return chosen

    # -- commands -------------------------------------------------------------------------------
    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.cluster.slurm_conf:
            env["SLURM_CONF"] = self.cluster.slurm_conf
        return env

    def _cmd(
        self, argv: list[str], check: bool = True, script: str | None = None, boxed: bool = False
    ) -> subprocess.CompletedProcess[str]:
        """``argv`` run with Slurm's client; ``script``: its standard input (sbatch's job script);
        ``boxed``: for a server's boxed job, with no variable of this process but PATH (the
        server's token and database address stay here; ``--export=NONE`` keeps them from the job)."""
        if shutil.which(argv[0]) is None:
            raise BackendUnavailable(
                f"{argv[0]} was not found: install Slurm's client (apt-get install slurm-client)"
            )
        env = self._env()
        if boxed:
            env = {k: v for k, v in env.items() if k in ("PATH", "SLURM_CONF")}
        try:
            proc = subprocess.run(argv, env=env, input=script, capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired as exc:
            raise BackendUnavailable(f"{' '.join(argv)} did not answer in 60 s: is slurmctld up?") from exc
        if check and proc.returncode != 0:
            raise BackendUnavailable(f"{' '.join(argv)} failed: {proc.stderr.strip() or proc.stdout.strip()}")
        return proc

    # -- dry run --------------------------------------------------------------------------------
    def run_dir(self, experiment_id: str) -> Path:
        return Path(self.cluster.slurm_shared_dir()) / "runs" / experiment_id

    def dry_run(self, plan: Plan, context: LaunchContext) -> DryRun:
        env: dict[str, str] = {**plan.build.env_vars, **plan.env, **context.tracking_env}
        run_dir = self.run_dir(context.experiment_id)
        workdir = context.workdir
        if context.isolation is not None:  # a server's job: its account's run folder, its code copied there
            env, workdir = slurm_box.job_env(env, run_dir), str(run_dir / slurm_box.CODE)
        env.pop("PHALANX_ATTEMPT", None)  # the script counts attempts itself: a requeue is one more
        env["PHALANX_CAPTURED"] = "1"  # the task wrapper writes the console to the replica's log file
        if self.cluster.server_url:
            env["PHALANX_HOST"] = self.cluster.server_url
        env.setdefault("PYTHONUNBUFFERED", "1")
        # the interpreter first, then the file's PATH when it gives one, else the node's own
        env["PATH"] = f"{Path(context.python).parent}:{env.get('PATH', '$PATH')}"
        script = render(
            plan,
            context.experiment_id,
            workdir,
            run_dir,
            env,
            partition=self.cluster.partition,
            account=self.cluster.account,
            mpi_plugin=self.mpi_plugin() if uses_mpi(plan) else "none",
            node_fetch=node_fetch(context),
        )
        if context.isolation is not None:
            script = slurm_box.said_in(script, context.isolation)
        return SlurmDryRun(backend=self.name, plan=plan, context=context, script=script)

    # -- submit ---------------------------------------------------------------------------------
    def submit(self, dry_run: DryRun) -> str:
        run_dir = self.run_dir(dry_run.context.experiment_id)
        iso = dry_run.context.isolation
        first = not run_dir.exists()
        try:
            if iso is None:
                self._archive_previous_attempt(run_dir)
            elif not first:
                slurm_box.archive_as_account(iso, run_dir)
            (run_dir / "logs").mkdir(parents=True, exist_ok=True)
            (run_dir / "state").mkdir(parents=True, exist_ok=True)
            if iso is not None:
                slurm_box.prepare(iso, run_dir, dry_run.context.workdir)
            script = expect_dry_run(dry_run, SlurmDryRun, self.name).script
            write_new(run_dir / "job.sbatch", script.encode())  # to read: sbatch is given it from here
            if token := dry_run.context.tracking_env.get(TOKEN_VARIABLE):  # the script reads it here
                write_new(run_dir / TOKEN_FILE, token.encode(), mode=0o600, owner=iso)
            keys = [t.key for c in layout(dry_run.plan) for t in c.tasks]
            write_new(run_dir / "tasks", ("\n".join(keys) + "\n").encode())  # the script writes it too
            self._refuse_if_it_can_never_run(script, dry_run, iso)
            out = self._sbatch(["--parsable"], script, iso).stdout.strip()
            job_id = out.split(";")[0]
            if not job_id.isdigit():
                raise BackendUnavailable(f"sbatch answered {out!r}, not a job id")
        except BaseException:
            if first:  # Slurm took nothing: leave no folder for an experiment that never existed
                shutil.rmtree(run_dir, ignore_errors=True)
            raise
        self._submitted[job_id] = time.monotonic()
        log.info("submitted %s as Slurm job %s", dry_run.context.experiment_id, job_id)
        return f"{job_id}:{run_dir}"

    def refuse_if_it_can_never_run(self, dry_run: DryRun) -> None:
        """The check ``submit`` makes, on a dry run alone: `phalanx group run --cluster` asks it of
        one trial before it records the group, so a search whose trials Slurm can never hold is
        refused at once (exit 2) instead of failing every trial one by one."""
        self._refuse_if_it_can_never_run(
            expect_dry_run(dry_run, SlurmDryRun, self.name).script, dry_run, dry_run.context.isolation
        )

    def _sbatch(
        self, options: Sequence[str], script: str, iso: Isolation | None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """sbatch of ``script``, given on its standard input. A server's boxed job is submitted as
        its account, with ``--export=NONE`` on the command line (over anything its script says) and
        none of the server's variables: the script comes from here, never from the account's
        folder, where the account could swap it for one exporting sbatch's environment."""
        if iso is None:
            return self._cmd(["sbatch", *options], check=check, script=script)
        boxed = [*options, *slurm_box.sbatch_identity(iso), "--export=NONE"]
        return self._cmd(["sbatch", *boxed], check=check, script=script, boxed=True)

    def _refuse_if_it_can_never_run(self, script: str, dry_run: DryRun, iso: Isolation | None) -> None:
        """``sbatch --test-only``: Slurm's own verdict, before anything is queued.

        Slurm accepts a job larger than its partition and leaves it pending forever (Reason
        PartitionConfig); the test-only submission says so at once, so it is refused with Slurm's words
        and what the job asked for.
        """
        proc = self._sbatch(["--test-only"], script, iso, check=False)
        if proc.returncode == 0:
            return
        said = " ".join(line.removeprefix("sbatch: error: ") for line in proc.stderr.strip().splitlines())
        asked = "; ".join(
            f"{', '.join(sorted({t.replica.name for t in c.tasks}))}: {len(c.tasks)} task(s), "
            + " ".join(o for o in c.resources.options(len(c.tasks)) if not o.startswith("--ntasks="))
            for c in layout(dry_run.plan)
        )
        where = f"partition {self.cluster.partition}" if self.cluster.partition else "the default partition"
        raise UsageError(
            f"Slurm cluster {self.cluster.name} can never run this experiment: {said or 'refused'} "
            f"(asked for {asked} on {where}). Lower the replicas' resources or processes, or pick a "
            "larger partition (phalanx cluster add NAME --kind slurm --partition P --replace)."
        )

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
        """The task keys the job's script wrote (``master``, ``worker-0.1``): it may write anything
        there, so only keys of that form are taken (never a path out of its folder)."""
        text = SlurmBackend._read(run_dir / "tasks")
        return [k for k in (text or "").split() if _TASK_KEY.fullmatch(k)]

    @staticmethod
    def _read(path: Path) -> str | None:
        """A file the job wrote, read without following a link it may have planted (a server's job
        runs as another account, and its run folder is that account's); a sparse 8 GiB one is not
        read (None, as a file not there)."""
        try:
            relative = f"{path.parent.name}/{path.name}"
            return read_inside(path.parent.parent, relative, JOB_FILE_MAX_BYTES).decode().strip()
        except (OSError, UnicodeDecodeError):
            return None

    def _replicas(self, run_dir: Path, job_status: ExperimentStatus | None) -> list[ReplicaStatus]:
        """Each replica from its tasks' state files: node at start, exit code (or "stopped") at end."""
        by_replica: dict[str, list[tuple[str | None, str | None, float | None]]] = {}
        culprits: dict[str, str] = {}  # replica -> its first failing process, when not process 0
        for key in self._tasks(run_dir):
            folder = run_dir / "state"
            exit_text = self._read(folder / f"{key}.exit")
            finished = None
            if exit_text is not None:
                with contextlib.suppress(OSError):
                    finished = (folder / f"{key}.exit").stat().st_mtime
            name, _, process = key.partition(".")
            if exit_text not in (None, "0", "stopped") and name not in culprits:
                culprits[name] = process
            by_replica.setdefault(name, []).append((self._read(folder / f"{key}.node"), exit_text, finished))
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
                if culprits.get(name) and reason:
                    reason = f"(process {culprits[name]} of {len(tasks)}) {reason}"
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
        """The job's state, and its attempt: how many earlier attempts the run folder keeps
        (attempts/<n>/, archived by a restart's submit or by the script of a requeued job), which is
        the PHALANX_ATTEMPT its tasks report with; the supervisor records a requeue from it."""
        job = self._describe(handle)
        if job is None:
            return None
        kept = folders_inside(self._split(handle)[1], "attempts")  # the job's own folder: no link
        return replace(job, attempt=min(sum(1 for n in kept if n.isdigit()), MAX_ATTEMPTS))

    def _describe(self, handle: str) -> JobStatus | None:
        job_id, run_dir = self._split(handle)
        ended = self._ended_by_state_files(run_dir)
        if ended is not None:
            return ended  # every task wrote its exit code: no need to ask Slurm
        queued = self.queue.job(job_id, self._submitted.get(job_id))
        if queued is not None:
            job: dict[str, str] | None = {"JobState": queued.state, "Reason": queued.reason}
        elif job_id in self._submitted and not self._seen_gone(job_id):
            job = {"JobState": "PENDING", "Reason": "None"}  # not yet in a snapshot
        else:
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
        started = any(self._read(run_dir / "state" / f"{k}.node") for k in self._tasks(run_dir))
        if status is ExperimentStatus.PENDING and started:
            status = ExperimentStatus.RUNNING  # its tasks have started since the last snapshot
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
        elif status is ExperimentStatus.PENDING:
            why = job.get("Reason", "None")
            if why in NEVER_REASONS:
                return JobStatus(
                    ExperimentStatus.FAILED,
                    tuple(replicas),
                    f"Slurm can never start this job ({why}): {NEVER_REASONS[why]}",
                )
            reason = why if why not in ("", "None") else None
        return JobStatus(status, tuple(replicas), reason)

    def _seen_gone(self, job_id: str) -> bool:
        """True once the job was submitted long enough ago that a snapshot without it means it is gone."""
        submitted = self._submitted.get(job_id)
        return submitted is not None and time.monotonic() - submitted > 30

    def _ended_by_state_files(self, run_dir: Path) -> JobStatus | None:
        """The outcome when every task has written its exit code (success, or a real failure)."""
        keys = self._tasks(run_dir)
        if not keys:
            return None
        exits = [self._read(run_dir / "state" / f"{k}.exit") for k in keys]
        if any(e is None for e in exits) or (run_dir / "cancelled").exists():
            return None
        replicas = self._replicas(run_dir, ExperimentStatus.RUNNING)
        if all(e == "0" for e in exits):
            return JobStatus(ExperimentStatus.SUCCEEDED, tuple(replicas))
        failed = sorted(
            (r for r in replicas if r.state is ReplicaState.FAILED), key=lambda r: r.finished_at or 0
        )
        if failed:
            return JobStatus(ExperimentStatus.FAILED, tuple(replicas), f"{failed[0].name} {failed[0].reason}")
        return None

    # -- logs -----------------------------------------------------------------------------------
    def logs(self, handle: str, replica: str, follow: bool = False) -> Iterator[str]:
        """Lines of every process of a replica; with follow, until the job has ended.

        A replica with several processes (torchrun-style, or MPI ranks) has one log file per process;
        each line is prefixed ``[rank R]`` (its global rank), and lines are split per file, so two
        processes' output is never glued together.
        """
        _, run_dir = self._split(handle)
        keys = [k for k in self._tasks(run_dir) if k.partition(".")[0] == replica] or [replica]
        ranks = self._ranks(replica, len(keys)) if len(keys) > 1 else {}
        files = {
            k: LogFile(run_dir / "logs" / f"{k}.log", f"[rank {ranks[k]}] " if k in ranks else "")
            for k in keys
        }
        last_check = 0.0
        done = not follow
        while True:
            if follow and time.monotonic() - last_check > 1.0:
                last_check = time.monotonic()
                try:
                    status = self.describe(handle)
                    done = status is None or status.status.done  # read the flag before the files
                except BackendUnavailable:
                    log.warning("slurmctld did not answer; still following %s", replica)
            got = False
            for f in files.values():
                for line in f.read(final=done):
                    got = True
                    yield line
            if done and not got:  # read to the end: a log is read a slice at a time
                return
            if not got:
                time.sleep(0.2)

    @staticmethod
    def _ranks(replica: str, processes: int) -> dict[str, int]:
        """Global rank of each process of a replica (master is node 0, worker-i node i + 1)."""
        node = (
            0
            if replica == "master"
            else int(replica.rsplit("-", 1)[1]) + 1
            if replica.startswith("worker-")
            else 0
        )
        return {(replica if j == 0 else f"{replica}.{j}"): node * processes + j for j in range(processes)}

    # -- cancel ---------------------------------------------------------------------------------
    def discard_logs(self, handle: str) -> None:
        """The log files of every attempt in the shared run folder; the state files stay (what
        ``describe`` reads after the job has aged out of Slurm)."""
        _, run_dir = self._split(handle)
        attempts = [f"attempts/{n}/logs" for n in folders_inside(run_dir, "attempts")]
        for logs in ["logs", *attempts]:  # never through a link the job planted (attempts -> ...)
            remove_inside(run_dir, logs)

    def cancel(self, handle: str) -> None:
        """scancel the job; cancelling a finished or forgotten job is a no-op."""
        job_id, run_dir = self._split(handle)
        if run_dir.is_dir() and not (run_dir / "cancelled").exists():
            with contextlib.suppress(OSError):  # replicas killed from now on were stopped, not failed
                write_new(run_dir / "cancelled", b"")
        proc = self._cmd(["scancel", job_id], check=False)
        if proc.returncode != 0 and "Invalid job id" not in proc.stderr and "already" not in proc.stderr:
            raise BackendUnavailable(f"scancel {job_id} failed: {proc.stderr.strip()}")
        self.queue.forget_snapshot()


_MPI_PLUGINS: dict[str, str] = {}  # slurm.conf -> the plugin srun --mpi=list offered


def create(cluster: Cluster | None = None, settings: Settings | None = None) -> SlurmBackend:
    """The registry's entry point: a Slurm backend for a named cluster."""
    return SlurmBackend(cluster, settings)
