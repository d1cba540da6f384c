"""The server's launcher: it starts what the server accepted, and watches what it started.

A submit is answered once it is written (``server.submitting``); everything slow happens here,
after the answer, in a few worker threads the server owns (``workers``, 2 by default: starting
supervisors is CPU work, and the API must stay responsive beside it). For an experiment a worker
unpacks its code, starts its supervisor (``Runner.start``: its own process and session, which
outlives the server) and waits until that supervisor has passed its start (its pid file written,
or it ended) before it takes the next one. For a group it unpacks the code, builds the trials'
environment (or asks the cluster whether it could run them) and starts the group's controller,
both through ``groups.launching.GroupLauncher`` (``check``, ``start``), as `phalanx group run` does.

A watcher pass (``sweep``, every ``period`` seconds, and once at start) makes the server
self-healing while it lives, not only when it starts:

* an accepted submission not started yet (the server was killed after its answer) is started;
* an experiment whose supervisor is gone gets its end from ``reconcile`` within seconds;
* an accepted experiment whose start ended early (its supervisor exited before it ran) is
  failed with what that supervisor said, never left `created`;
* a group whose controller is gone gets a new one (``groups.detached.adopt``), which resumes it.

Whether an experiment's supervisor still runs is told by the lock it holds for its whole life
(``runs/<id>/supervisor.lock``): a second start of the same experiment (the server restarted
between starting it and recording that) finds the lock held and leaves at once.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from phalanx import bundles, reconcile, repro
from phalanx.config import Settings
from phalanx.domain import ExperimentFilter, ExperimentStatus, GroupStatus
from phalanx.errors import NotFound, PhalanxError
from phalanx.groups import detached
from phalanx.groups.launching import GroupLauncher, GroupOptions
from phalanx.groups.lock import holder
from phalanx.machine.box import isolation_of
from phalanx.machine.locks import held
from phalanx.runner.detached import SUPERVISOR_LOCK
from phalanx.runner.resuming import Resume
from phalanx.runner.running import SUPERVISOR_LOG, Runner, StartTimeout
from phalanx.server import orders
from phalanx.server.submitting import bundles_dir
from phalanx.spec.group import load_group_text
from phalanx.store.base import LocalStore
from phalanx.store.submissions import Submission, SubmissionKind, SubmissionState
from phalanx.supervisor.outcome import PID_FILE

if TYPE_CHECKING:
    from phalanx.machine.forks import ChildProcess

log = logging.getLogger(__name__)

WORKERS = 2
PERIOD_SECONDS = 2.0
START_WAIT_SECONDS = 120.0  # a worker waits this long at most for a supervisor to pass its start


class Launcher:
    def __init__(
        self,
        store: LocalStore,
        settings: Settings,
        *,
        workers: int = WORKERS,
        period: float = PERIOD_SECONDS,
        runner: Callable[[], Runner] | None = None,
    ) -> None:
        self.store = store
        self.settings = settings
        self.workers = workers
        self.period = period
        self._runner = runner or (lambda: Runner(settings))
        self._queue: collections.deque[str] = collections.deque()
        self._pending: set[str] = set()  # ids queued or being launched: each once at a time
        self._ready = threading.Condition()
        self._stopped = threading.Event()
        self._threads: list[threading.Thread] = []

    # -- life ----------------------------------------------------------------------------------------
    def start(self) -> Launcher:
        for n in range(self.workers):
            thread = threading.Thread(target=self._work, name=f"launcher-{n}", daemon=True)
            thread.start()
            self._threads.append(thread)
        watcher = threading.Thread(target=self._watch, name="launcher-watch", daemon=True)
        watcher.start()
        self._threads.append(watcher)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop taking work (what was started runs on: supervisors outlive the server)."""
        self._stopped.set()
        with self._ready:
            self._ready.notify_all()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def wake(self, submission_id: str) -> None:
        """Start this accepted submission soon (a worker takes it; at most once at a time)."""
        with self._ready:
            if submission_id in self._pending:
                return
            self._pending.add(submission_id)
            self._queue.append(submission_id)
            self._ready.notify()

    # -- the watcher ---------------------------------------------------------------------------------
    def _watch(self) -> None:
        while not self._stopped.is_set():
            try:
                self.sweep()
            except Exception as exc:  # the store is down, the disk is full: the next pass tries again
                log.warning("the launcher's watch pass failed: %s", _short(exc))
            self._stopped.wait(self.period)

    def sweep(self) -> None:
        """One watch pass (see the module docstring)."""
        for sub in self.store.submissions(SubmissionState.ACCEPTED):
            self.wake(sub.id)
        reconcile.reconcile(self.store, self.settings)
        page = self.store.list_experiments(_created())
        for exp in page.items:
            if self.store.submission(exp.id) is not None:
                self._settle_unstarted(exp.id)
        started = detached.adopt(self.store, self.settings)
        if started:
            log.warning("started the controllers of groups %s again", ", ".join(started))

    # -- the workers ---------------------------------------------------------------------------------
    def _work(self) -> None:
        while self.take(block=True) is not None:
            pass

    def take(self, block: bool = False) -> str | None:
        """Start the next queued submission in this thread (what each worker does in a loop); its
        id, or None when none is queued (``block``: wait for one, until the launcher stops)."""
        with self._ready:
            while block and not self._queue and not self._stopped.is_set():
                self._ready.wait()
            if not self._queue or self._stopped.is_set():
                return None
            submission_id = self._queue.popleft()
        try:
            sub = self.store.submission(submission_id)
            if sub is not None and sub.state is SubmissionState.ACCEPTED:
                self._launch(sub)
        except Exception as exc:  # logged; the watcher's next pass takes it again
            log.warning("starting submission %s failed: %s", submission_id, _short(exc))
        finally:
            with self._ready:
                self._pending.discard(submission_id)
        return submission_id

    def _launch(self, sub: Submission) -> None:
        if sub.kind is SubmissionKind.GROUP:
            self._launch_group(sub)
        else:
            self._launch_experiment(sub)

    def _launch_experiment(self, sub: Submission) -> None:
        try:
            exp = self.store.get_experiment(sub.id)
        except NotFound:  # deleted before it started
            self._done(sub.id)
            return
        run_dir = self.settings.runs_dir / sub.id
        if exp.status is not ExperimentStatus.CREATED or held(run_dir / SUPERVISOR_LOCK):
            self._done(sub.id)  # its supervisor was started before (the server restarted since)
            return
        if _said_something(run_dir / SUPERVISOR_LOG):  # a start that ended before it ran
            self._settle_unstarted(sub.id)
            self._done(sub.id)
            return
        order = orders.read(self.settings, sub.id)
        if order is None or order.launch is None:
            reconcile.fail_unstarted(self.store, sub.id, "its launch order was lost")
            self._done(sub.id)
            return
        try:
            _unpack(self.settings, order)
        except PhalanxError as exc:
            reconcile.fail_unstarted(self.store, sub.id, str(exc))
            self._done(sub.id)
            return
        launch = order.launch
        cwd = launch.options.workdir or order.work  # the file's folder, as `phalanx run` runs there
        _, process, _ = self._runner().start(launch.spec, launch.options, cwd=cwd, headline=launch.headline)
        self._done(sub.id)
        log.info("experiment %s: supervisor pid %s started", sub.id, process.pid)
        self._await_start(run_dir, process)
        self._reap_later(sub.id, process)

    def resume(self, planned: Resume) -> None:
        """Start the supervisor that resumes ``planned`` (its own process and session, as a submit's
        is; it outlives the server) and return once it has reopened the experiment; it is reaped
        when it ends. StartFailed (its supervisor's words) when it ended before that."""
        exp_id = planned.options.experiment_id or ""
        try:
            submitted = self._runner().submit(
                planned.spec, planned.options, cwd=planned.options.workdir, headline=f"resuming {exp_id}"
            )
        except StartTimeout as exc:  # still starting: reaped all the same
            self._reap_later(exp_id, exc.process)
            raise
        log.info("experiment %s: resumed by supervisor pid %s", exp_id, submitted.process.pid)
        self._reap_later(exp_id, submitted.process)

    def _reap_later(self, experiment_id: str, process: ChildProcess) -> None:
        threading.Thread(
            target=self._reap, args=(experiment_id, process), name=f"reap-{experiment_id}", daemon=True
        ).start()

    def _await_start(self, run_dir: Path, process: ChildProcess) -> None:
        """Until the supervisor has passed its start (its pid file written) or ended: the worker
        then takes the next one, so at most ``workers`` supervisors start at a time."""
        deadline = time.monotonic() + START_WAIT_SECONDS
        while time.monotonic() < deadline and not self._stopped.is_set():
            if process.poll() is not None or (run_dir / PID_FILE).exists():
                return
            time.sleep(0.05)

    def _reap(self, experiment_id: str, process: ChildProcess) -> None:
        process.wait()
        with contextlib.suppress(Exception):  # the watcher's pass settles it otherwise
            self._settle_unstarted(experiment_id)

    def _settle_unstarted(self, experiment_id: str) -> None:
        """An accepted experiment still `created` whose supervisor has ended: failed with what its
        supervisor said (a refusal the submit could not see, such as a dry run's)."""
        run_dir = self.settings.runs_dir / experiment_id
        log_path = run_dir / SUPERVISOR_LOG
        # the log first: a supervisor writes its first line after taking its lock, so a line read
        # before the lock is looked at means the lock seen free is one its supervisor let go of
        if not _said_something(log_path) or held(run_dir / SUPERVISOR_LOCK):
            return
        with contextlib.suppress(NotFound):
            if self.store.get_experiment(experiment_id).status is ExperimentStatus.CREATED:
                reconcile.fail_unstarted(self.store, experiment_id, _said(log_path))

    def _launch_group(self, sub: Submission) -> None:
        try:
            group = self.store.get_group(sub.id)
        except NotFound:
            self._done(sub.id)
            return
        if (
            group.done
            or group.status is not GroupStatus.CREATED
            or holder(self.settings.home / "groups" / group.id)
        ):
            self._done(sub.id)
            return
        order = orders.read(self.settings, sub.id)
        groups = GroupLauncher(self.settings, self.store)
        try:
            if order is None:
                raise PhalanxError("its launch order was lost")
            _unpack(self.settings, order)
            name = order.file_name or "group.yml"
            spec = load_group_text(order.file_text or "", name, params=group.options.get("params") or {})
            spec = replace(spec, base=replace(spec.base, source_file=str(order.work / name)))
            # as `phalanx group run [--cluster NAME]`: a trial the cluster can never run, or an
            # environment that cannot be built, fails the group now (the submit recorded it); the
            # trials' build boxed as the project's when its submit recorded a box
            box = isolation_of(group.options)
            groups.check(spec, GroupOptions(workdir=order.work, cluster=order.target, isolation=box))
        except PhalanxError as exc:
            self.store.update_group(
                group.id, status=GroupStatus.FAILED, reason=str(exc), finished_at=time.time()
            )
            self._done(sub.id)
            return
        detached.mark_server_group(self.settings, group.id)
        process = groups.start(group.id)
        self._done(sub.id)
        threading.Thread(target=process.wait, name=f"reap-group-{group.id}", daemon=True).start()
        log.info("group %s: controller pid %s started", group.id, process.pid)

    def _done(self, submission_id: str) -> None:
        self.store.mark_launched(submission_id)
        orders.remove(self.settings, submission_id)


def _unpack(settings: Settings, order: orders.Order) -> None:
    """The order's code into its working folder, then the file text that was validated."""
    data = bundles.BundleStore(bundles_dir(settings)).path(order.bundle_sha256).read_bytes()
    if order.snapshot:
        repro.extract(data, order.work)
    else:
        bundles.unpack(data, order.work)
    if order.file_name is not None and order.file_text is not None:
        file = order.work / order.file_name
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(order.file_text, encoding="utf-8")  # the text validated, whatever the bundle held


def _created() -> ExperimentFilter:
    return ExperimentFilter(status=ExperimentStatus.CREATED, limit=1000)


def _said_something(path: Path) -> bool:
    try:
        return path.stat().st_size > 0
    except OSError:
        return False


def _said(path: Path) -> str:
    """What a supervisor that ended early said: its `error:` lines, else its last lines."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "its supervisor ended before it started"
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    errors = [ln.removeprefix("error: ") for ln in lines if ln.startswith("error: ")]
    return "; ".join(errors) or " / ".join(lines[-5:]) or "its supervisor ended before it started"


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text[:200]}" if text else type(exc).__name__
