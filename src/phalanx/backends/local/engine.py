"""The local engine: every replica is a process group on this machine, led by its reaper.

``dry_run`` chooses free ports, checks the topology fits the machine (limits.allocate) and returns,
per launch unit (one per replica; one mpirun launcher for MPI), the exact argv, working directory
and environment added to the inherited one. ``submit`` writes each unit's config under
``<runs>/<id>/attempts/<n>/`` and starts the reaper (``phalanx.backends.local.reaper``) for it in a
new session: forked from this process while no other thread runs (``reaper.fork``: no interpreter
start per replica, issue 42), else, and always for a boxed replica, under ``python -I``
(``leaders``). The job's
state lives on disk (pids, status files written by the reapers, log files), so ``describe``,
``logs`` and ``cancel`` also work from a process other than the one that submitted (TorchX's local
scheduler keeps jobs only in memory; ``phalanx stop`` needs better).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from phalanx import frameworks
from phalanx.backends.base import (
    MACHINE_PATH,
    DryRun,
    JobStatus,
    LaunchContext,
    ReplicaStatus,
    expect_dry_run,
)
from phalanx.backends.dry_runs import LocalDryRun, LocalProcess, LocalUnit
from phalanx.backends.local import boxes, members
from phalanx.backends.local.leaders import check_work_folder, start_leader
from phalanx.backends.local.units import Ended, StartedUnit, exit_reason, proc_start
from phalanx.backends.logfiles import follow_file, split_stream
from phalanx.config import Settings
from phalanx.domain import ExperimentStatus, ReplicaState
from phalanx.errors import BackendUnavailable, SpecError
from phalanx.frameworks import Endpoints, mpi
from phalanx.machine import limits, proctree
from phalanx.machine.box import Isolation
from phalanx.machine.ports import address_in_use, free_port, still_taken
from phalanx.machine.procs import Seen, judge
from phalanx.plan import Plan, command_argv
from phalanx.tracking.boot import BOOT_DIR, ENV_CAPTURE

if TYPE_CHECKING:
    from phalanx.backends.local.mpi_output import RankFailure
    from phalanx.machine.forks import ChildProcess

HOST = "127.0.0.1"
RANK_FAILURE_BYTES = 256 * 1024  # how much of a failed mpirun unit's log is read for its culprit
_LEADING_PYTHON = re.compile(r"(^|&&|\|\||;)(\s*)python3?(?=\s|$)")


def with_interpreter(command: str, python: str) -> str:
    """`python` at the start of each command of run.cmd means the experiment's interpreter."""
    quoted = shlex.quote(python)
    return _LEADING_PYTHON.sub(lambda m: f"{m.group(1)}{m.group(2)}{quoted}", command)


class LocalBackend:
    """Runs a Plan as process groups on this machine. One instance may track several jobs."""

    name = "local"
    restarts_itself = False

    def __init__(
        self, settings: Settings | None = None, cluster: object = None, grace_seconds: float = 5.0
    ) -> None:
        self.settings = settings or Settings()
        self.grace = grace_seconds
        self._popen: dict[str, dict[str, ChildProcess]] = {}
        self._finished: dict[tuple[str, str], float] = {}
        self._rank_failures: dict[tuple[str, str], RankFailure | None] = {}
        # units whose reaper died before its processes: when we first told them to end, how many
        self._orphaned: dict[tuple[str, str], tuple[float, int]] = {}
        self._settled: set[tuple[str, str]] = set()  # leader and every process of the unit gone
        # a failed unit's console read once for "address in use": (it says so, the probed port lost)
        self._in_use: dict[tuple[str, str], tuple[bool, int | None]] = {}

    # -- dry run --------------------------------------------------------------------------------
    def dry_run(self, plan: Plan, context: LaunchContext) -> LocalDryRun:
        here = limits.machine()
        if context.cpu_pool is not None or context.gpu_pool is not None:
            # admitted by the ledger: replicas get the cores and GPUs granted, disjoint from others'
            here = limits.Machine(
                cpus=context.cpu_pool if context.cpu_pool is not None else here.cpus,
                memory_mib=here.memory_mib,
                gpus=context.gpu_pool if context.gpu_pool is not None else here.gpus,
            )
        allotted = limits.allocate(
            [(r.name, r.resources, r.processes) for r in plan.replicas], here, context.oversubscribe
        )
        ports = {r.name: free_port(HOST) for r in plan.replicas}
        endpoints = Endpoints.on_host(plan, HOST, ports, interface="lo")
        command = with_interpreter(plan.command, context.python)
        log_dir = Path(context.log_dir or self.settings.runs_dir / context.experiment_id / "logs")
        home = self.settings.home
        base = boxes.base_env(plan, context, home) if context.isolation else self._base_env(plan, context)
        units: list[LocalUnit] = []
        if frameworks.uses_mpi(plan):
            problems = mpi.check(plan)
            if problems:
                raise SpecError(problems[0])
            master = plan.replicas[0]
            env = {
                **base,
                **frameworks.phalanx_env(context.experiment_id, master, context.tracking_env, plan.params),
                **mpi.launcher_env(plan, endpoints, command),
                **limits.limit_env(allotted[master.name], plan.env),
            }
            covers = tuple(r.name for r in plan.replicas)
            launcher = (LocalProcess(tuple(mpi.launcher_argv(plan)), env),)
            units.append(_unit(master.name, covers, allotted[master.name], log_dir, context, launcher, home))
        else:
            for replica in plan.replicas:
                procs = []
                for local_rank in range(replica.processes):
                    env = {
                        **base,
                        **frameworks.phalanx_env(
                            context.experiment_id, replica, context.tracking_env, plan.params
                        ),
                        **frameworks.framework_env(plan, replica, endpoints, local_rank),
                        **limits.limit_env(allotted[replica.name], plan.env),
                        **_thread_env(plan, allotted[replica.name]),
                    }
                    procs.append(LocalProcess(tuple(command_argv(command)), env))
                lim = allotted[replica.name]
                units.append(_unit(replica.name, (replica.name,), lim, log_dir, context, tuple(procs), home))
        return LocalDryRun(
            backend=self.name, plan=plan, context=context, units=tuple(units), ports=tuple(ports.values())
        )

    def _base_env(self, plan: Plan, context: LaunchContext) -> dict[str, str]:
        """The plan's env, the interpreter first on PATH (before the file's PATH when it gives one,
        where ``$PATH`` is this machine's, else this machine's), unbuffered output, the SDK
        importable."""
        env = {**plan.build.env_vars, **plan.env}
        bindir = str(Path(context.python).parent)
        machine = os.environ.get("PATH", os.defpath)
        given = MACHINE_PATH.sub(lambda _: machine, env.get("PATH", machine))
        # an empty entry would be the current folder: none is added
        env["PATH"] = os.pathsep.join([bindir, *(p for p in given.split(os.pathsep) if p)])
        env.setdefault("PYTHONUNBUFFERED", "1")
        sdk = context.tracking_env.get("PYTHONPATH")
        # TensorBoard capture without a wrapper (docs/integrations.md): every Python process of the
        # replica starts with the SDK's sitecustomize, which captures SummaryWriter scalars unless
        # the experiment's env says PHALANX_CAPTURE_TENSORBOARD=0 (the SDK copy has it too)
        boot = Path(sdk) / "phalanx" / "tracking" / "_boot" if sdk else BOOT_DIR
        env.setdefault(ENV_CAPTURE, "1")
        inherited = env.get("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(boot), sdk, inherited) if p)
        return env

    # -- submit ---------------------------------------------------------------------------------
    def submit(self, dry_run: DryRun) -> str:
        request = expect_dry_run(dry_run, LocalDryRun, self.name)
        units = request.units
        exp_id = dry_run.context.experiment_id
        if any(u.processes[0].argv[0] == "mpirun" for u in units) and not shutil.which("mpirun"):
            raise BackendUnavailable("mpirun was not found: install Open MPI (apt-get install openmpi-bin)")
        run_dir = self.settings.runs_dir / exp_id
        attempts = run_dir / "attempts"
        attempts.mkdir(parents=True, exist_ok=True)
        attempt = len([p for p in attempts.iterdir() if p.is_dir()])
        folder = attempts / str(attempt)
        folder.mkdir()
        handle = f"{exp_id}:{attempt}"
        cgroup_root = limits.cgroup_v2_root()
        iso = dry_run.context.isolation
        if iso is not None:  # its folders, and its code given to its account
            boxes.prepare(iso, dry_run.context, self.settings.home, [u.name for u in units])
        state: list[dict[str, Any]] = []
        popens: dict[str, ChildProcess] = {}
        self._popen[handle] = popens
        try:
            for unit in units:
                state.append(
                    {
                        **self._start_unit(unit, folder, cgroup_root, exp_id, popens, iso),
                        "ports": list(request.ports),
                    }
                )
        except BaseException:
            if not popens:  # nothing started: no attempt to keep, its number is the next one's
                del self._popen[handle]
                shutil.rmtree(folder, ignore_errors=True)
                raise
            self._write_state(folder, state)
            self.cancel(handle)
            raise
        self._write_state(folder, state)
        return handle

    def _start_unit(
        self,
        unit: LocalUnit,
        folder: Path,
        cgroup_root: Path | None,
        exp_id: str,
        popens: dict[str, ChildProcess],
        iso: Isolation | None = None,
    ) -> dict[str, Any]:
        boxed = iso is not None and bool(unit.box)
        check_work_folder(unit.cwd, unit.name, boxed)
        log = Path(unit.log)
        log.parent.mkdir(parents=True, exist_ok=True)
        offset = log.stat().st_size if log.exists() else 0
        # the file holds only what Phalanx adds (secrets reach the reaper in its environment, a boxed one
        # on its stdin: boxes.reaper_start); the mark finds the unit's processes once its reaper is gone
        mark = {members.ENV: members.marker(f"{exp_id}:{folder.name}", unit.name)}
        processes: list[dict[str, Any]] = [
            {"argv": list(p.argv), "cwd": unit.cwd, "env": {**p.env, **mark}} for p in unit.processes
        ]
        lim = unit.limits
        memory = float(lim["memory"][:-2]) if lim.get("memory") else None
        config = {
            "name": unit.name,
            "processes": processes,
            "log": str(log),
            "status": str(folder / f"{unit.name}.status.json"),
            "parent": os.getpid(),
            "grace": self.grace,
            "cpus": lim.get("cpus"),
            "memory_mib": memory,
            "cgroup": str(cgroup_root / f"phalanx-{exp_id}-{unit.name}") if cgroup_root and memory else None,
        }
        name = f"{exp_id}.{folder.name}.{unit.name}"
        group = boxes.cgroup_for(name, iso, lim) if iso is not None and boxed else None
        if iso is not None and boxed:  # its own cgroup: no v2 memory group, no watchdog
            config.update(cgroup=None, box=boxes.reaper_config(iso, list(unit.box), group))
        cfg = folder / f"{unit.name}.json"
        fd = os.open(cfg, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # holds PHALANX_TOKEN
        with os.fdopen(fd, "w") as f:
            json.dump(config, f)
        started_at = time.time()
        env, given = boxes.reaper_start(config, processes[0]["env"], mark)
        with open(log, "ab") as errors, given:  # the reaper's own trouble, if any, lands in the log
            title = f"phalanx replica {exp_id} {unit.name}"
            try:
                proc = start_leader(cfg, env, unit.cwd, given, errors, title, boxed)
            except OSError:
                check_work_folder(unit.cwd, unit.name, boxed)  # changed since the check above?
                raise
            popens[unit.name] = proc
        return {
            "name": unit.name,
            "replicas": list(unit.replicas),
            "ranks_per_replica": int(unit.processes[0].env.get("PHALANX_PROCESSES", "1") or 1),
            "tagged": "--tag-output" in unit.processes[0].argv,
            "pid": proc.pid,
            "start": proc_start(proc.pid) or "",
            "status": config["status"],
            "log": str(log),
            "offset": offset,
            "started_at": started_at,
            "cgroup": list(group.folders) if group else [],
            "cgroup_v2": bool(group and group.v2),
        }

    @staticmethod
    def _write_state(folder: Path, state: list[dict[str, Any]]) -> None:
        tmp = folder / "state.tmp"
        tmp.write_text(json.dumps({"units": state}))
        tmp.replace(folder / "state.json")

    # -- state ----------------------------------------------------------------------------------
    def _folder(self, handle: str) -> Path:
        exp_id, _, attempt = handle.partition(":")
        return self.settings.runs_dir / exp_id / "attempts" / (attempt or "0")

    def _units(self, handle: str) -> list[StartedUnit] | None:
        try:
            doc = json.loads((self._folder(handle) / "state.json").read_text())
        except (OSError, ValueError):
            return None
        return [StartedUnit(**u) for u in doc["units"]]

    def _alive(self, handle: str, unit: StartedUnit) -> bool:
        proc = self._popen.get(handle, {}).get(unit.name)
        if proc is not None:
            return proc.poll() is None
        # procs.judge, the one liveness check: pid and start time ("" was gone when recorded)
        start = int(unit.start) if unit.start.isdigit() else -1
        return judge(unit.pid, start) is Seen.RUNS

    def _returncode(self, handle: str, unit: StartedUnit) -> int | None:
        proc = self._popen.get(handle, {}).get(unit.name)
        return proc.returncode if proc is not None else None

    def _cancelled(self, handle: str) -> set[str] | None:
        """The units whose leader was alive when the job was cancelled (None: never cancelled).
        Only those were stopped: one that had ended before keeps its own outcome."""
        try:
            text = (self._folder(handle) / "cancelled").read_text()
        except OSError:
            return None
        try:
            return set(json.loads(text))
        except ValueError:  # an empty file (older versions): every unit was told to stop
            return {u.name for u in self._units(handle) or []}

    def _left_behind(self, handle: str, unit: StartedUnit) -> list[int]:
        """The unit's processes still running although its leader is gone (none once settled)."""
        key = (handle, unit.name)
        if key in self._settled:
            return []
        found = members.find(members.marker(handle, unit.name), exclude=[unit.pid])
        found = sorted({*found, *boxes.procs(unit.cgroup, unit.cgroup_v2)} - {unit.pid})
        if not found:
            self._settled.add(key)  # a gone tree cannot grow again: no need to look twice
        return found

    def _end_orphans(self, handle: str, unit: StartedUnit, pids: list[int]) -> None:
        """The reaper died before its processes: do its job. SIGTERM first, as it would have (a
        failed process's siblings get the grace period), SIGKILL once the grace has passed."""
        key = (handle, unit.name)
        first = self._orphaned.get(key)
        if first is None:
            self._orphaned[key] = (time.monotonic(), len(pids))
            members.signal_all(pids, signal.SIGTERM)
        elif time.monotonic() - first[0] > self.grace:
            members.signal_all(pids, signal.SIGKILL)

    def _unit_status(self, handle: str, unit: StartedUnit) -> Ended:
        key = (handle, unit.name)
        if self._alive(handle, unit):
            return Ended(ReplicaState.RUNNING, None, None, 0.0)
        left = self._left_behind(handle, unit)
        if left:  # never `stopped` nor `failed` while a process of it runs: its cores are still used
            self._end_orphans(handle, unit, left)
            return Ended(ReplicaState.RUNNING, None, None, 0.0)
        finished = self._finished.setdefault(key, time.time())
        try:
            status = json.loads(Path(unit.status).read_text())
        except (OSError, ValueError):
            status = None
        code: int | None
        reason: str | None
        if status is not None:
            sig = status.get("signal")
            code = -int(sig) if sig else int(status.get("exit_code") or 0)
            reason = status.get("reason")
            finished = float(status.get("failed_at") or finished)
        else:
            rc = self._returncode(handle, unit)
            code = rc if rc is not None else -signal.SIGKILL
            reason = None
        if code == 0:
            return Ended(ReplicaState.SUCCEEDED, 0, None, finished)
        # stopped: its leader was told to stop (cancel), or vanished while we were cancelling
        stopped = unit.name in (self._cancelled(handle) or ()) and (reason == "stopped" or status is None)
        if reason is None or reason == "stopped":
            reason = exit_reason(code)
        orphaned = self._orphaned.get(key)
        if status is None and not stopped:  # its reaper died without a word: say so, and what it left
            reason = f"lost its leader (the reaper, pid {unit.pid}, {reason})"
            if orphaned is not None:
                reason += f"; Phalanx ended the {orphaned[1]} process(es) it left running"
        disk = (status or {}).get("disk_error") or (
            _disk_full(Path(unit.status).parent) if status is None else None
        )
        if disk:  # say what is wrong with the machine, not only the exit code it led to
            reason = f"{reason} (the disk is full: {disk})"
        in_use, lost = self._in_use.get(key) or (False, None)
        if key not in self._in_use and not stopped:
            in_use, lost = address_in_use(Path(unit.log), unit.ports, unit.offset)
            if lost is not None and not still_taken(lost, HOST):  # free once its processes are gone:
                lost = None  # the job held it itself (or bound it twice), not another process
            self._in_use[key] = (in_use, lost)
        if lost is not None:  # a probed port lost (see phalanx.machine.ports): the supervisor starts again
            reason = (
                f"{reason} (address in use: port {lost}, which Phalanx picked for the rendezvous,"
                " was taken by another process first)"
            )
        elif in_use:
            reason = f"{reason} (address in use: a port it binds was taken by another process)"
        if stopped:
            return Ended(ReplicaState.STOPPED, code, "stopped", finished)
        return Ended(ReplicaState.FAILED, code, reason, finished, port_lost=lost is not None)

    def describe(self, handle: str) -> JobStatus | None:
        units = self._units(handle)
        if units is None:
            return None
        replicas: list[ReplicaStatus] = []
        for unit in units:
            state, code, reason, finished, port_lost = self._unit_status(handle, unit)
            failure = self._rank_failure(handle, unit) if state is ReplicaState.FAILED else None
            for name in unit.replicas:
                own_state, own_reason = state, reason
                if failure is not None and name == self._owner(unit, failure.rank):
                    own_reason = failure.reason()  # its own last lines, not mpirun's boilerplate
                elif failure is not None:
                    own_state = ReplicaState.STOPPED
                    own_reason = f"stopped: mpirun ended its ranks after rank {failure.rank} failed"
                replicas.append(
                    ReplicaStatus(
                        name=name,
                        state=own_state,
                        host=HOST,
                        exit_code=code,
                        reason=own_reason,
                        pid=unit.pid,
                        finished_at=finished or None,
                        started_at=unit.started_at or None,
                        port_lost=port_lost and own_state is ReplicaState.FAILED,
                    )
                )
        states = [r.state for r in replicas]
        if ReplicaState.FAILED in states:
            first = min(
                (r for r in replicas if r.state is ReplicaState.FAILED), key=lambda r: r.finished_at or 0
            )
            overall, why = ExperimentStatus.FAILED, f"{first.name} {first.reason}"
        elif all(s is ReplicaState.SUCCEEDED for s in states):
            overall, why = ExperimentStatus.SUCCEEDED, None
        elif all(s.done for s in states):
            overall, why = ExperimentStatus.STOPPED, "stopped"
        else:
            overall, why = ExperimentStatus.RUNNING, None
        return JobStatus(status=overall, replicas=tuple(replicas), reason=why)

    # -- logs -----------------------------------------------------------------------------------
    def logs(self, handle: str, replica: str, follow: bool = False) -> Iterator[str]:
        """Lines of a replica's log for this attempt; with follow, until the replica has ended.

        An mpirun unit holds every rank's output in one file, tagged by ``--tag-output``
        (``[1,R]<stdout>:``, see mpi_output): a replica gets the lines of its own ranks, prefixed
        ``[rank R]``, and mpirun's own untagged lines go to the master.
        """
        units = self._units(handle) or []
        unit = next((u for u in units if u.name == replica), None)
        if unit is None:
            unit = next((u for u in units if replica in u.replicas and len(u.replicas) > 1), None)
        if unit is None:
            return  # an unknown name
        found = unit
        ended = (lambda: not self._alive(handle, found)) if follow else None
        lines = follow_file(found.log, found.offset, ended)
        if not found.tagged and len(found.replicas) <= 1:
            yield from lines
            return
        yield from self._unit_lines(lines, found, replica)

    @classmethod
    def _unit_lines(cls, lines: Iterator[str], unit: StartedUnit, replica: str) -> Iterator[str]:
        """``replica``'s lines of an mpirun unit's log: its ranks' lines, prefixed ``[rank R]``."""
        from phalanx.backends.local.mpi_output import TaggedStream  # why: an mpirun unit only (issue 42)

        stream = TaggedStream()
        for raw in lines:  # mpirun tags each rank's lines itself: its own stderr mark is dropped
            for rank, text in stream.feed(split_stream(raw)[1]):
                if cls._owner(unit, rank) == replica:
                    yield _ranked(rank, text)
        for rank, text in stream.close():
            if cls._owner(unit, rank) == replica:
                yield _ranked(rank, text)

    @staticmethod
    def _owner(unit: StartedUnit, rank: int | None) -> str:
        """The replica a rank's lines belong to; mpirun's own words go to the first."""
        if rank is None:
            return unit.replicas[0]
        return unit.replicas[min(rank // max(1, unit.ranks_per_replica), len(unit.replicas) - 1)]

    def _rank_failure(self, handle: str, unit: StartedUnit) -> RankFailure | None:
        """The rank that ended a failed mpirun unit and its last lines, read once from the end of
        the unit's log (the last RANK_FAILURE_BYTES: a traceback and mpirun's summary are there)."""
        if not unit.tagged:
            return None
        from phalanx.backends.local.mpi_output import rank_failure  # why: an mpirun unit only (issue 42)

        key = (handle, unit.name)
        if key not in self._rank_failures:
            try:
                with open(unit.log, "rb") as f:
                    size = f.seek(0, os.SEEK_END)
                    start = max(unit.offset, size - RANK_FAILURE_BYTES)
                    f.seek(start)
                    text = f.read().decode(errors="replace")
            except OSError:
                return None
            lines = [split_stream(line)[1] for line in text.splitlines()]  # mpirun's stderr, marked
            if start > unit.offset and lines:
                lines = lines[1:]  # began inside a line
            self._rank_failures[key] = rank_failure(lines)
        return self._rank_failures[key]

    def discard_logs(self, handle: str) -> None:
        """Every attempt's log files of the experiment (runs/<id>/logs); the state stays."""
        exp_id = handle.partition(":")[0]
        shutil.rmtree(self.settings.runs_dir / exp_id / "logs", ignore_errors=True)

    def refuse_if_it_can_never_run(self, dry_run: DryRun) -> None:
        """Nothing to add: the dry run refused what this machine can never hold."""

    # -- cancel ---------------------------------------------------------------------------------
    def cancel(self, handle: str) -> None:
        """SIGTERM every replica leader (it stops its tree), and every process of a unit whose
        leader is already gone (found by its mark, see members); SIGKILL what remains after the
        grace. Returns once no process of the job runs, so the cores it held are free."""
        units = self._units(handle) or []
        folder = self._folder(handle)
        leading = [u for u in units if self._alive(handle, u)]
        if folder.exists():
            told = (self._cancelled(handle) or set()) | {u.name for u in leading}
            tmp = folder / "cancelled.tmp"
            tmp.write_text(json.dumps(sorted(told)))
            tmp.replace(folder / "cancelled")
        for unit in leading:
            with contextlib.suppress(ProcessLookupError):
                os.kill(unit.pid, signal.SIGTERM)
        for unit in units:
            if unit not in leading:
                members.signal_all(self._left_behind(handle, unit), signal.SIGTERM)
        deadline = time.monotonic() + self.grace + 3
        while time.monotonic() < deadline and self._running(handle, units):
            time.sleep(0.1)
        deadline = time.monotonic() + 30  # a SIGKILLed process ends at once, unless the kernel holds it
        while time.monotonic() < deadline:
            left = self._running(handle, units)
            if not left:
                break
            members.signal_all(left, signal.SIGKILL)
            time.sleep(0.05)
        for unit in units:
            proc = self._popen.get(handle, {}).get(unit.name)
            if proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=10)
        boxed = [(tuple(u.cgroup), u.cgroup_v2) for u in units if u.cgroup]
        if boxed and not self._running(handle, units):
            boxes.finish(handle.partition(":")[0], self.settings.home, boxed)

    def _running(self, handle: str, units: list[StartedUnit]) -> list[int]:
        """Every live process of the job: leaders, their trees and what a dead leader left."""
        pids: list[int] = []
        for unit in units:
            if self._alive(handle, unit):
                mark = members.marker(handle, unit.name)
                pids += [unit.pid, *members.find(mark, pgid=unit.pid), *proctree.descendants(unit.pid)]
                pids += boxes.procs(unit.cgroup, unit.cgroup_v2)
            else:
                pids += self._left_behind(handle, unit)
        return sorted(set(pids))


def _disk_full(folder: Path) -> str | None:
    """ "No space left on device (FOLDER)" when the disk holding ``folder`` has (almost) no room."""
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return None
    return f"No space left on device ({folder})" if free < 64 * 1024 else None


def _unit(
    name: str,
    covers: tuple[str, ...],
    lim: limits.ReplicaLimits,
    log_dir: Path,
    context: LaunchContext,
    processes: tuple[LocalProcess, ...],
    home: Path,
) -> LocalUnit:
    box = tuple(boxes.unit_argv(context, home, name, lim)) if context.isolation else ()
    log = str(log_dir / f"{name}.log")
    return LocalUnit(name, covers, log, lim.to_json(), context.workdir, processes, box)


def _ranked(rank: int | None, text: str) -> str:
    """``[rank R] text``; a line that already says so (Horovod scripts often print their rank that
    way) is not labelled twice."""
    if rank is None:
        return text
    label = f"[rank {rank}] "
    return text if text.startswith(label) else label + text


def _thread_env(plan: Plan, given: limits.ReplicaLimits) -> dict[str, str]:
    """The framework's thread pools for a replica pinned to cores (TensorFlow's: one inter-op thread
    deadlocks a parameter-server worker), as the cluster engines set them; the file's env wins."""
    if given.threads is None:
        return {}
    return {k: v for k, v in frameworks.thread_env(plan, given.threads).items() if k not in plan.env}
