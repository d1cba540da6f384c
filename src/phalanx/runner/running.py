"""The Runner: prepare, supervise here or start detached, and follow an experiment by its id."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from phalanx import knobs
from phalanx.config import Settings
from phalanx.errors import NotFound, PhalanxError
from phalanx.ids import new_id
from phalanx.machine.forks import can_fork
from phalanx.machine.locks import hold
from phalanx.machine.procs import record_process, recorded_process
from phalanx.runner.forking import fork_supervisor
from phalanx.runner.options import LAUNCH_LOCK, LAUNCH_LOCK_FD, Launch, LaunchOptions, write_launch
from phalanx.store import open_store, through_outage
from phalanx.store.lite import LiteReader, sqlite_path
from phalanx.store.migrations import HEAD

if TYPE_CHECKING:
    from phalanx.buildprogress import BuildProgress
    from phalanx.domain import Experiment, LogLine
    from phalanx.machine.forks import ChildProcess, Forked
    from phalanx.spec.model import ExperimentSpec
    from phalanx.store.base import LocalStore, Store
    from phalanx.store.run_store import RunStore
    from phalanx.supervisor import Observer, Outcome, Prepared

SUPERVISOR_LOG = "supervisor.log"  # runs/<id>/supervisor.log: a detached supervisor's output
STARTUP_TIMEOUT = 120.0  # generous: 2 shared cores
POLL_SECONDS = 0.1
STORE_OUTAGE_SECONDS = 120.0  # how long a server-accepted experiment's supervisor waits for its store


class StartFailed(PhalanxError):
    """A detached supervisor ended before its experiment existed: ``text`` is what it printed (its
    `error: ...` lines), ``exit_code`` its status (2 for a user's mistake)."""

    def __init__(self, text: str, exit_code: int, log: Path) -> None:
        super().__init__(text or f"the supervisor exited with status {exit_code}")
        self.text = text
        self.exit_code = exit_code
        self.log = log


class StartTimeout(PhalanxError):
    """A detached supervisor did not create its experiment in time; ``process`` still runs."""

    def __init__(self, message: str, process: ChildProcess) -> None:
        super().__init__(message)
        self.process = process


@dataclass(frozen=True)
class Submitted:
    """A detached experiment that exists: its id, its supervisor process and that process's log;
    its status (and reason) as the store held them once it existed (or was reopened)."""

    experiment_id: str
    process: ChildProcess
    log: Path
    status: str = "created"
    reason: str | None = None


class Runner:
    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or Settings()

    # -- before anything starts ------------------------------------------------------------------
    def dry_run(self, spec: ExperimentSpec, options: LaunchOptions) -> Prepared:
        """What would start: plan, engine, dry run. Nothing built, written or started."""
        return self._prepare(spec, options, dry=True)

    def prepare(
        self, spec: ExperimentSpec, options: LaunchOptions, progress: BuildProgress | None = None
    ) -> Prepared:
        """As ``dry_run``, with the experiment's environment built (it may take minutes; ``progress``
        is told how it goes)."""
        return self._prepare(spec, options, dry=False, progress=progress)

    def _prepare(
        self,
        spec: ExperimentSpec,
        options: LaunchOptions,
        *,
        dry: bool,
        progress: BuildProgress | None = None,
    ) -> Prepared:
        from phalanx.supervisor import prepare  # why: `run --detach`: no supervisor

        knobs.check()  # a malformed PHALANX_* knob is refused now, not by a supervisor minutes later
        options.apply_environment()
        record = options.record.to_json()
        return prepare(
            spec,
            settings=self.settings,
            workdir=options.workdir,
            experiment_id=options.experiment_id,
            oversubscribe=options.oversubscribe,
            cluster=options.cluster,
            dry=dry,
            launch=record,
            isolation=options.isolation,
            progress=progress,
        )

    # -- here, to the end ------------------------------------------------------------------------
    def run(
        self,
        spec_or_prepared: ExperimentSpec | Prepared,
        options: LaunchOptions,
        observer: Observer | None = None,
        *,
        handle_signals: bool = True,
        owns_run_dir: bool | None = None,
        store: LocalStore | None = None,
    ) -> Outcome:
        """Supervise the experiment in this process (this thread must live as long as it: the local
        engine's replicas end with it, PR_SET_PDEATHSIG) and return how it ended.

        An experiment whose environment must be built first is recorded before the build (status
        building). Should it fail before the experiment is recorded, nothing is left that `phalanx ls` would
        never show: its spool, and its run folder when this launch owns it (``owns_run_dir``;
        default: no id was given, else the caller that gave the id reads its log there).
        ``store``: the open store to use (else the settings' store, opened when first needed)."""
        from phalanx.store.lite_writer import LiteWriter  # why: the supervisor's, not the waiting CLI's
        from phalanx.supervisor import Prepared, Supervisor  # why: `run --detach`: no supervisor
        from phalanx.supervisor.opener import LazyStore  # why: `run --detach`: no supervisor

        options.apply_environment()
        if owns_run_dir is None:
            owns_run_dir = options.experiment_id is None
        exp_id = options.experiment_id
        # a submit the server accepted is started even through a database outage: its answer
        # promised it would run (a client's submit waits as long, apiclient)
        patience = STORE_OUTAGE_SECONDS if options.accepted else 0.0
        settings = self.settings
        # opened once the replicas are starting (see Supervisor.run); the lean writer where it can
        records = LazyStore(
            store or (lambda: open_store_through_outage(settings, patience)),
            lambda full: LiteWriter.open(settings.database_url, HEAD, full, settings.artifacts_root),
        )

        exists = options.accepted  # the server recorded it at submit: its row is updated, not created
        try:
            if isinstance(spec_or_prepared, Prepared):
                prepared = spec_or_prepared
            else:
                dry = self.dry_run(spec_or_prepared, options)
                exp_id = dry.experiment_id
                options = replace(options, experiment_id=exp_id)
                if not options.resume and _builds(dry):
                    exists = self._record_building(dry, records.full(), observer, options.accepted)
                prepared = self._build(
                    spec_or_prepared, options, observer, records.full() if exists else None
                )
            exp_id = prepared.experiment_id
            supervisor = Supervisor(
                prepared,
                records,
                self.settings,
                observer,
                handle_signals=handle_signals,
                priority=options.priority,
                wait=options.wait,
                resume=options.resume,
                exists=exists,
                params_section=options.params_section,
                notify=options.notify,
                store_patience=patience,
            )
            return supervisor.run()
        except BaseException:
            if not options.resume and exp_id is not None and not _recorded(records.any_open, exp_id):
                shutil.rmtree(self.settings.spool_dir / exp_id, ignore_errors=True)
                if owns_run_dir:
                    shutil.rmtree(self.settings.runs_dir / exp_id, ignore_errors=True)
            raise

    def _record_building(
        self, dry: Prepared, store: LocalStore, observer: Observer | None, accepted: bool = False
    ) -> bool:
        """The experiment exists (status building, with its id, in `phalanx ls`) before a build
        that may take minutes; its supervisor is this process (`phalanx stop` finds it)."""
        from phalanx.supervisor import record_building  # why: `run --detach`: no supervisor
        from phalanx.supervisor.outcome import PID_FILE  # why: `run --detach`: no supervisor

        record_process(self.settings.runs_dir / dry.experiment_id / PID_FILE)
        record_building(dry, store, accepted=accepted)
        _say(observer, f"experiment {dry.experiment_id}: building its environment ({dry.context.python})")
        return True

    def _build(
        self,
        spec: ExperimentSpec,
        options: LaunchOptions,
        observer: Observer | None,
        store: LocalStore | None,
    ) -> Prepared:
        """``prepare`` (the build), its progress in the experiment's console (``BuildConsole``); a
        build that fails, or is interrupted, ends the experiment recorded as building (failed, or
        stopped), with why, after its last lines are stored."""
        from phalanx.runner.buildconsole import BuildConsole  # why: `run --detach`: no ingest

        spool_dir = self.settings.spool_dir / (options.experiment_id or "")
        console = BuildConsole(options.experiment_id or "", observer, store, spool_dir)
        started = time.monotonic()
        try:
            prepared = self.prepare(spec, options, console.progress)
        except BaseException as exc:
            console.close()
            if store is not None and options.experiment_id is not None:
                from phalanx.domain import ExperimentStatus  # why: a failed build only

                stopped = isinstance(exc, KeyboardInterrupt)
                status = ExperimentStatus.STOPPED if stopped else ExperimentStatus.FAILED
                reason = "stopped while its environment was built" if stopped else str(exc)
                store.update_experiment(
                    options.experiment_id, status=status, reason=reason, finished_at=time.time()
                )
            raise
        if store is not None:
            console.progress.note(f"environment ready in {time.monotonic() - started:.0f} s")
        console.close()
        return prepared

    # -- detached ----------------------------------------------------------------------------------
    def start(
        self,
        spec: ExperimentSpec,
        options: LaunchOptions,
        *,
        log: Path | None = None,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        headline: str | None = None,
    ) -> tuple[str, subprocess.Popen[bytes], Path]:
        """Start the experiment's supervisor (`python -m phalanx.runner RUN_DIR`) in its own session
        (a Ctrl-C at the caller's terminal does not reach it) and return at once: its id, its
        process and its log (``log``, default runs/<id>/supervisor.log, appended to)."""
        with self._launch_written(spec, options, log, headline) as (exp_id, run_dir, log_path, lock):
            child_env = dict(os.environ if env is None else env)
            child_env.update(self._store_env())
            passed: tuple[int, ...] = ()
            if lock is not None:  # the supervisor holds it from here on (detached.supervise_launch)
                child_env[LAUNCH_LOCK_FD] = str(lock)
                passed = (lock,)
            # -P: the folder it starts in (a submitted bundle's, on a server) is never on its path, so
            # a planted json.py is not what the supervisor imports (isolation/test_hostile_jobs.py)
            argv = [sys.executable, "-P", "-m", "phalanx.runner", str(run_dir)]
            with open(log_path, "ab") as out:
                proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    cwd=str(cwd) if cwd else None,
                    env=child_env,
                    start_new_session=True,
                    close_fds=True,
                    pass_fds=passed,
                )
        return exp_id, proc, log_path

    def fork(
        self,
        spec: ExperimentSpec,
        options: LaunchOptions,
        *,
        log: Path | None = None,
        close: Iterable[int] = (),
        store: LocalStore | None = None,
    ) -> tuple[str, Forked | subprocess.Popen[bytes], Path]:
        """``start``, but the supervisor is forked from this process (no Python start-up, and no
        import or validation done twice: a group's trial starts in milliseconds, `phalanx run
        --detach` costs one interpreter) when this process may fork (``forks.can_fork``: no other
        thread runs); else ``start``. ``log``: as ``start``'s. ``close``: fds the supervisor must
        not keep (a lock); ``store``: this process's open store, which a forked supervisor uses
        rather than opening its own (``store.reuse_after_fork``). The forked supervisor is this
        process's child: a caller that outlives it reaps it (``Forked.poll`` or ``wait``), or it
        stays a zombie until the caller exits."""
        if not can_fork():
            return self.start(spec, options, log=log)
        # the forked supervisor keeps the launch lock (an inherited fd)
        with self._launch_written(spec, options, log) as (exp_id, run_dir, log_path, _lock):
            forked = fork_supervisor(
                run_dir, log_path, self._store_env(), close, store, supervise=_supervise_in_child
            )
        return exp_id, forked, log_path

    @contextlib.contextmanager
    def _launch_written(
        self, spec: ExperimentSpec, options: LaunchOptions, log: Path | None, headline: str | None = None
    ) -> Iterator[tuple[str, Path, Path, int | None]]:
        """The launch written into its run folder under the folder's launch lock, for a supervisor
        started or forked in the block: its id, run folder, log (``log``, default
        runs/<id>/supervisor.log) and the lock's fd (None: a supervisor of that folder still holds
        it), closed here after the block (the supervisor has its own copy by then)."""
        exp_id = options.experiment_id or new_id()
        options = replace(options, experiment_id=exp_id)
        run_dir = self.settings.runs_dir / exp_id
        log_path = log or run_dir / SUPERVISOR_LOG
        outside = not log_path.resolve().is_relative_to(run_dir.resolve())
        lock = _take_launch_lock(run_dir)
        try:
            write_launch(run_dir, Launch(spec, options, remove_run_dir=outside, headline=headline))
            yield exp_id, run_dir, log_path, lock
        finally:
            if lock is not None:
                os.close(lock)

    def _store_env(self) -> dict[str, str]:
        """Where the store is, as this Runner's settings say (they may not come from the environment)."""
        s = self.settings
        env = {"PHALANX_HOME": str(s.home)}
        for var, value in (
            ("PHALANX_DB_URL", s.db_url),
            ("PHALANX_ARTIFACTS_URL", s.artifacts_url),
            ("PHALANX_HOST", s.host),
            ("PHALANX_TOKEN", s.token),
        ):
            if value:
                env[var] = value
        return env

    def submit(
        self,
        spec: ExperimentSpec,
        options: LaunchOptions,
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        headline: str | None = None,
        timeout: float = STARTUP_TIMEOUT,
        fork: bool = False,
    ) -> Submitted:
        """``start``, then return once the experiment exists (for a resume: once its supervisor has
        reopened it). StartFailed when the supervisor ended before that (its run folder removed:
        nothing half-written); StartTimeout past ``timeout`` (the supervisor is left running).
        ``fork``: the supervisor is forked from this process (``fork``), unless it needs its own
        ``env``, ``cwd`` or ``headline``."""
        run_dir = self.settings.runs_dir / (options.experiment_id or "")
        log_start = 0
        if options.resume:
            log_path = run_dir / SUPERVISOR_LOG
            log_start = log_path.stat().st_size if log_path.exists() else 0
        if fork and env is None and cwd is None and headline is None:
            exp_id, proc, log = self.fork(spec, options)
        else:
            exp_id, proc, log = self.start(spec, options, env=env, cwd=cwd, headline=headline)
        status, reason = self._wait_started(
            exp_id, proc, log, timeout, resume=options.resume, log_start=log_start
        )
        return Submitted(exp_id, proc, log, status, reason)

    def _wait_started(
        self,
        exp_id: str,
        proc: ChildProcess,
        log: Path,
        timeout: float,
        *,
        resume: bool = False,
        log_start: int = 0,
    ) -> tuple[str, str | None]:
        """Bounded wait for the supervisor's experiment row (or its reopen); its early exit is the
        error to raise. Returns the experiment's status and reason once it is there."""
        started: Callable[[Any, Settings, str, int], bool]
        probe: _ExistenceProbe | None = None
        if resume:
            store: Any = open_store(self.settings)
            started = _resumed
        else:  # `phalanx run --detach` polls one row: the lean SQLite reader when it can (no SQLAlchemy)
            probe = _ExistenceProbe(self.settings)
            store, started = probe, _probed
        try:
            self._wait_for(started, store, exp_id, proc, log, timeout, resume=resume, log_start=log_start)
            if probe is not None:
                return probe.state(exp_id) or ("created", None)  # None: deleted as soon as it ended
            exp = store.get_experiment(exp_id)
            return str(exp.status), exp.reason
        finally:
            if probe is not None:
                probe.close()

    def _wait_for(
        self,
        started: Callable[[Any, Settings, str, int], bool],
        store: Any,
        exp_id: str,
        proc: ChildProcess,
        log: Path,
        timeout: float,
        *,
        resume: bool,
        log_start: int,
    ) -> None:
        """Look (backing off to every 0.25 s) until ``started`` says so, the supervisor exits
        (its failure raised as StartFailed) or ``timeout`` passes (StartTimeout)."""
        deadline = time.monotonic() + timeout
        delay = 0.02
        while True:
            if started(store, self.settings, exp_id, proc.pid):
                return
            code = proc.poll()
            if code is not None:
                if code == 0 or started(store, self.settings, exp_id, proc.pid):
                    return  # it may have created the row and finished already
                raise self._start_failed(exp_id, code, log, log_start, resume=resume)
            if time.monotonic() > deadline:
                what = "reopen" if resume else "create"
                raise StartTimeout(
                    f"the supervisor did not {what} experiment {exp_id} within {timeout:.0f} s; see {log}",
                    proc,
                )
            time.sleep(delay)
            delay = min(delay * 1.5, 0.25)

    def _start_failed(self, exp_id: str, code: int, log: Path, start: int, *, resume: bool) -> StartFailed:
        try:
            with open(log, "rb") as fh:
                fh.seek(start)
                text = fh.read().decode(errors="replace").strip()
        except OSError:
            text = ""
        if resume:  # a resume that lost the race: its own error, not the winner's lines
            errors = [ln for ln in text.splitlines() if ln.startswith("error: ") or _failed_line(ln, exp_id)]
            text = "\n".join(errors) or text
        else:  # nothing half-written: the experiment never existed
            shutil.rmtree(self.settings.runs_dir / exp_id, ignore_errors=True)
        return StartFailed(text, code, log)

    # -- following an experiment -------------------------------------------------------------------
    def _store(self) -> Store:
        return open_store(self.settings)

    def status(self, experiment_id: str) -> Experiment:
        """The experiment as it stands, its end decided if its supervisor is gone."""
        from phalanx.reconcile import settle  # why: a caller following a run, not `run --detach`

        store = self._store()
        return settle(store, self.settings, store.get_experiment(experiment_id))

    def wait(self, experiment_id: str, timeout: float | None = None, poll: float = 0.5) -> Experiment:
        """Until the experiment has ended; TimeoutError past ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            exp = self.status(experiment_id)
            if exp.status.done:
                return exp
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"experiment {exp.id} is still {exp.status} after {timeout} s")
            time.sleep(poll)

    def stop(self, experiment_id: str, timeout: float = 60.0, reason: str | None = None) -> str:
        """Stop it (its supervisor stops every replica); its status once stopped."""
        from phalanx.supervisor import stop_experiment  # why: `run --detach`: no supervisor

        store = self._store()
        exp = store.get_experiment(experiment_id)
        if exp.status.done:
            return str(exp.status)
        return str(stop_experiment(store, self.settings, exp, timeout=timeout, reason=reason))

    def logs(self, experiment_id: str, replica: str | None = None, offset: int = 0) -> list[LogLine]:
        """Console lines stored so far (every replica's by time, or one replica's)."""
        return self._store().logs(experiment_id, replica=replica, offset=offset)


def _take_launch_lock(run_dir: Path) -> int | None:
    """``run_dir``'s LAUNCH_LOCK, taken (its fd: the caller hands it to the supervisor it starts,
    then closes its own copy), or None when a supervisor of that folder still holds it: that one
    lives on, and the new one settles with it as it would without the lock."""
    return hold(run_dir / LAUNCH_LOCK)


def _exists(store: Store, experiment_id: str) -> bool:
    try:
        store.get_experiment(experiment_id)
    except NotFound:
        return False
    return True


def _recorded(store: RunStore | None, experiment_id: str) -> bool:
    """Whether the experiment was recorded (True when the store cannot tell: keep its files)."""
    if store is None:
        return False
    try:
        store.get_experiment(experiment_id)
    except NotFound:
        return False
    except Exception:
        return True
    return True


def _created(store: Store, settings: Settings, experiment_id: str, pid: int) -> bool:
    return _exists(store, experiment_id)


class _ExistenceProbe:
    """Whether an experiment's row exists yet, read through ``store.lite.LiteReader`` while the
    store is an up-to-date SQLite file (the supervisor creates and migrates it; until it has, the
    row is not there), else through the full store. Spares `phalanx run --detach` importing
    SQLAlchemy (0.3-0.4 CPU-s) to poll one row (docs/cli-speed.md)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._full: Store | None = None
        self._reader: Any = None  # store.lite.LiteReader, kept open once the file is at HEAD

    def exists(self, experiment_id: str) -> bool:
        return self.state(experiment_id) is not None

    def state(self, experiment_id: str) -> tuple[str, str | None] | None:
        """The experiment's status and reason; None while it does not exist."""
        if self._reader is not None:  # one SELECT per look: the wait costs next to no CPU
            return self._reader.experiment_state(experiment_id)  # type: ignore[no-any-return]
        if self._full is None:
            if sqlite_path(self.settings.database_url) is not None:
                reader = LiteReader.open(self.settings.database_url, HEAD)
                if reader is None:
                    return None  # no file, no schema yet, or not migrated yet: not created yet
                self._reader = reader
                return reader.experiment_state(experiment_id)
            self._full = open_store(self.settings)
        try:
            exp = self._full.get_experiment(experiment_id)
        except NotFound:
            return None
        return str(exp.status), exp.reason

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None


def _probed(probe: _ExistenceProbe, settings: Settings, experiment_id: str, pid: int) -> bool:
    return probe.exists(experiment_id)


def _resumed(store: Store, settings: Settings, experiment_id: str, pid: int) -> bool:
    """Reopened by this very supervisor (not another resume's): its pid file names it and the
    experiment is no longer failed or stopped."""
    ours = recorded_process(settings.runs_dir / experiment_id / "supervisor.pid") == pid
    return ours and not store.get_experiment(experiment_id).status.resumable


def _builds(dry: Prepared) -> bool:
    """Whether preparing it for real builds an environment first (a venv not there yet)."""
    python = dry.context.python
    return os.path.abspath(python) != os.path.abspath(sys.executable) and not os.path.exists(python)


def _say(observer: Observer | None, text: str) -> None:
    if observer is None:
        sys.stderr.write(f"phalanx: {text}\n")
        sys.stderr.flush()
    else:
        observer.message(text)


def _supervise_in_child(argv: list[str], store: LocalStore | None) -> int:
    """A forked trial's supervision: a Runner of its own, on the settings its environment names
    (the fork added ``Runner._store_env``), exactly as `python -m phalanx.runner RUN_DIR`."""
    from phalanx.runner.detached import supervise_launch  # why: in the forked child only

    return supervise_launch(argv, lambda: Runner(Settings()), store)


def open_store_through_outage(settings: Settings, patience: float) -> LocalStore:
    """The settings' store, tried again every second while it cannot be reached, for ``patience``
    seconds (0: once)."""
    return through_outage(lambda: open_store(settings), patience)


def _failed_line(line: str, experiment_id: str) -> bool:
    """The supervisor's line saying the experiment failed (its start failed once it was recorded)."""
    return line.startswith(f"phalanx: experiment {experiment_id} failed: ")
