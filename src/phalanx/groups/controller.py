"""The group controller: the effects around the search's decisions (``groups.core``).

The core decides (which values the next trial gets, whether a trial is pruned, when the group stops
early, how it ends); the controller carries that out: it records each trial with the experiment id
it is about to use, launches it as a whole experiment (``_start_experiment``: the same launch path,
engine choice and machine ledger as any experiment), reads its metric from the store, stops pruned
trials, and records every outcome. It holds the group's lock (``groups.lock``) for its whole life:
one controller per group at a time.

After a SIGKILL, ``Controller(...).run()`` from `phalanx group resume` opens the same Optuna study
(``PHALANX_HOME/groups/ID/study.sqlite``), adopts the running trials and launches only what is still
missing: the planned number of trials runs once each, with the values an uninterrupted search draws.
"""

from __future__ import annotations

import contextlib
import difflib
import logging
import math
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from phalanx.config import Settings
from phalanx.domain import (
    TRIAL_PARAMS,
    Experiment,
    Group,
    GroupStatus,
    Trial,
    TrialState,
    TrialUpdate,
    best_trial,
)
from phalanx.errors import NotFound, PhalanxError
from phalanx.groups import core, search
from phalanx.groups.ending import (
    dumps,
    ended_while_unwatched,
    stop_all,
    stop_group,
)
from phalanx.groups.lock import ControllerRunning, controller_lock
from phalanx.groups.setup import build_trials_env, check_trials_can_run, create, trial_build
from phalanx.groups.waking import Waker
from phalanx.ids import new_id
from phalanx.machine.box import isolation_of
from phalanx.machine.locks import held
from phalanx.reconcile import settle
from phalanx.runner import LaunchOptions, LaunchRecord, Runner
from phalanx.runner.forking import preload
from phalanx.runner.options import LAUNCH_LOCK
from phalanx.spec.dump import spec_to_yaml
from phalanx.spec.group import recorded_group_spec
from phalanx.spec.model import ExperimentSpec
from phalanx.store.base import LocalStore

if TYPE_CHECKING:
    from phalanx.machine.forks import Forked

log = logging.getLogger(__name__)

POLL_SECONDS = 0.3  # the longest the loop sleeps: an adopted trial (no child of ours) is seen this late
LAUNCH_TIMEOUT = 180.0


def launched(run_dir: Path, exists: Callable[[], bool], timeout: float = LAUNCH_TIMEOUT) -> bool:
    """Whether the launch a killed controller left in ``run_dir`` made its experiment: ``exists()``
    now, or once the supervisor it had started, still alive (it holds the folder's LAUNCH_LOCK),
    creates it. False at once when none lives: nothing will create it, so the trial is launched
    again (it was: wait ``timeout``, 180 s, for a launch that no process was making)."""
    deadline = time.monotonic() + timeout
    while not exists():
        if not run_dir.exists():
            return False  # never begun (the folder is made first), or failed and cleaned up
        if not held(run_dir / LAUNCH_LOCK):  # its launcher and supervisor are gone
            return exists()  # (it may have created it just before it ended)
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


class GroupError(PhalanxError):
    code = "group_error"


@dataclass
class _Live:
    """A trial the controller is watching (its search state is the core's)."""

    trial: Trial
    launch: subprocess.Popen[bytes] | Forked | None = None  # its supervisor, until seen ended (reaped)
    freed_at: float | None = None  # monotonic time the slot it took was freed (controller overhead)
    seen: bool = False  # its experiment row has been seen
    recorded: tuple[int, float] | None = None  # the (step, value) last written to its trial row


class Controller:
    """Runs (or resumes) one group to its end. ``say`` prints progress (the CLI passes a printer)."""

    def __init__(
        self,
        store: LocalStore,
        settings: Settings,
        group_id: str,
        say: Callable[[str], None] | None = None,
    ) -> None:
        self.store = store
        self.settings = settings
        self.group = store.get_group(group_id)
        self.spec = recorded_group_spec(self.group)
        self.hp = self.spec.hptuning
        self.say = say or (lambda text: log.info("%s", text))
        self.live: dict[int, _Live] = {}
        self.interrupted: str | None = None
        self.launch_seconds: list[float] = []  # slot free -> next trial's experiment exists (bench)
        self.notice_seconds: list[float] = []  # a trial's end in the store -> the controller saw it
        self.folder = settings.home / "groups" / self.group.id
        self._core: core.Search | None = None  # opened under the lock (``run``)
        # wake as soon as a trial's end is recorded or its supervisor exits, not at the next poll
        # (groups.waking); off: the plain POLL_SECONDS poll (bench/sweep.py measures both)
        self.waker = Waker(self.folder)
        self._lock_fd: int | None = None
        # fork each trial's supervisor from this process (no Python start-up) when it may fork
        self.fork_trials = True
        self.freed_wall: dict[int, float] = {}  # trial number -> when the slot it took was freed

    @property
    def searcher(self) -> core.Search:
        assert self._core is not None, "the search is opened by run()"
        return self._core

    # -- the loop -------------------------------------------------------------------------------

    def run(self, handle_signals: bool = True) -> Group:
        """Drive the group to its end. Raises ControllerRunning (exit 2) when another controller
        holds the group, before anything is written."""
        if self.group.done:
            return self.group
        with controller_lock(self.folder, self.group.id) as lock_fd:
            self._lock_fd = lock_fd
            self.group = self.store.get_group(self.group.id)
            if self.group.done:  # the controller that held the lock finished it meanwhile
                gid = self.group.id
                raise ControllerRunning(
                    f"group {gid}: another controller ran it to its end ({self.group.status}) meanwhile;"
                    f" nothing to resume: `phalanx group get {gid}` shows its trials"
                )
            previous = self._install_signals() if handle_signals else {}
            try:
                self.store.update_group(
                    self.group.id,
                    status=GroupStatus.RUNNING,
                    controller_pid=os.getpid(),
                    controller_host=socket.gethostname(),
                )
                self.waker.open()
                if self.fork_trials:  # what each forked trial supervisor would import, imported once
                    preload()
                self._restore()
                return self._loop()
            finally:
                self.waker.close()
                self._lock_fd = None
                for signum, handler in previous.items():
                    signal.signal(signum, handler)

    def _install_signals(self) -> dict[int, Any]:
        def on_signal(signum: int, _frame: object) -> None:
            self.interrupted = f"stopped by {signal.Signals(signum).name}"

        previous: dict[int, Any] = {}
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous[signum] = signal.signal(signum, on_signal)
        return previous

    def _loop(self) -> Group:
        freed_at: float | None = time.monotonic()
        while True:
            current = self.store.get_group(self.group.id)
            if current.stop_requested or self.interrupted:
                (stop,) = self.searcher.stop(self.interrupted or "stopped by phalanx group stop")
                assert isinstance(stop, core.StopGroup)
                return self._stop_group(stop)
            if self._watch():
                freed_at = time.monotonic()
            for op in self.searcher.next():
                if isinstance(op, core.Launch):
                    self._launch(op, freed_at)
                    freed_at = None
                    if self.interrupted:
                        break
                elif isinstance(op, core.StopGroup):
                    return self._stop_group(op)
                elif isinstance(op, core.Finish):
                    return self._finish(op.status, op.reason)
            self._wait(POLL_SECONDS)

    def _wait(self, timeout: float) -> None:
        """Until a trial's end is recorded, one of its supervisors (our children) exits, or
        ``timeout`` (groups.waking)."""
        running = [
            live.launch.pid
            for live in self.live.values()
            if live.launch is not None and live.launch.returncode is None  # not yet seen ended
        ]
        self.waker.wait(running, timeout)

    # -- resuming -------------------------------------------------------------------------------

    def _inherited(self) -> list[int]:
        """The fds a forked trial supervisor must close: the group's lock (its flock would outlive
        this controller), the wake FIFO's ends and the pidfds."""
        return self.waker.fds() + ([self._lock_fd] if self._lock_fd is not None else [])

    def _restore(self) -> None:
        """Open the group's study (made on the first run); adopt (or launch) the unfinished trials."""
        trials = self.store.list_trials(self.group.id)
        self._core = core.Search(
            self.hp,
            name=self.group.id,
            seed=search.group_seed(self.hp.search.seed, self.group.id),
            planned=self.group.planned,
            storage=search.study_storage(self.folder),
        )
        finals = {t.number: self._finals(t) for t in trials if t.state is TrialState.DONE}
        pending = self.searcher.restore(trials, finals, series=self._series)
        for t in trials:
            if t.state.finished:
                continue
            live = _Live(t)
            self.live[t.number] = live
            if not self._launched(t.experiment_id):
                self.say(
                    f"trial {t.number}: relaunching {t.experiment_id}"
                    " (the controller stopped before it started)"
                )
                live.launch = self._start_experiment(t)
            self.store.update_trial(self.group.id, t.number, state=TrialState.RUNNING)
            self.store.link_experiment(t.experiment_id, self.group.id)
            self.say(f"trial {t.number}: {t.experiment_id} still running, watching it again")
        for op in pending:  # a prune decided by the killed controller, not yet carried out
            if isinstance(op, core.Prune) and op.number in self.live:
                self._prune(op)

    # -- launching ------------------------------------------------------------------------------

    def _launch(self, op: core.Launch, freed_at: float | None) -> None:
        trial = Trial(
            group_id=self.group.id,
            number=op.number,
            experiment_id=new_id(),
            params=op.params,
            state=TrialState.LAUNCHING,
            internal=op.internal,
        )
        self.store.add_trial(trial)  # first: a crash from here on is resumed, not repeated
        launch = self._start_experiment(trial)
        self.store.update_trial(self.group.id, op.number, state=TrialState.RUNNING)
        shown = ", ".join(f"{k}={v}" for k, v in op.params.items())
        self.say(f"trial {op.number}: {trial.experiment_id} starting ({shown})")
        self.live[op.number] = _Live(
            replace(trial, state=TrialState.RUNNING), launch=launch, freed_at=freed_at
        )
        if freed_at is not None:  # in wall time too: the bench compares it with replicas' starts
            self.freed_wall[op.number] = time.time() - (time.monotonic() - freed_at)

    def _trial_spec(self, trial: Trial) -> ExperimentSpec:
        """The trial's validated spec: the group's experiment with the sampled values as its params
        (recorded as its launch params: `phalanx get`, rerun). Its text is also written to
        groups/ID/trial-N.yml, what `phalanx rerun`/`resume` of the trial read back."""
        spec = self.spec.trial_spec(trial.params)
        base_dir = (
            Path(self.group.source_file).parent if self.group.source_file else Path(self.group.workdir or ".")
        )
        spec = replace(spec, build=trial_build(spec, base_dir), name=f"{self.group.name}-{trial.number}")
        text = spec_to_yaml(spec)
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"trial-{trial.number}.yml"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(path)
        return replace(
            spec, source_file=str(path), source_text=text, launch_params=dict(trial.params), notes=()
        )

    def _start_experiment(self, trial: Trial) -> subprocess.Popen[bytes] | Forked:
        """Start the trial's supervisor (the Runner, from the trial's spec object) with the id
        recorded for this trial; not waited for here (``_watch`` sees the experiment appear, or the
        supervisor end without creating it), so the other trials are watched meanwhile."""
        spec = self._trial_spec(trial)
        options = LaunchOptions(
            workdir=Path(self.group.workdir).resolve() if self.group.workdir else None,
            cluster=str(self.group.options["cluster"]) if self.group.options.get("cluster") else None,
            oversubscribe=bool(self.group.options.get("oversubscribe")),
            experiment_id=trial.experiment_id,
            record=LaunchRecord(file=spec.source_file, params=dict(trial.params)),
            params_section=TRIAL_PARAMS,
            notify=self.waker.notify,
            isolation=isolation_of(self.group.options),  # a server's group: every trial boxed
        )
        # the run folder first: a controller killed from here on leaves a launch that `_launched`
        # waits for on resume (the experiment appears, or the supervisor fails before creating it
        # and removes the folder). Made by the launch alone, a kill before it got that far let the
        # resumed controller start the same experiment id a second time beside the orphaned one
        run_dir = self.settings.runs_dir / trial.experiment_id
        run_dir.mkdir(parents=True, exist_ok=True)
        try:
            # its own session: a Ctrl-C at the terminal reaches the controller, which then stops the
            # trial. Its output goes to the group's folder: a supervisor that fails before creating
            # the experiment removes its run folder (see above) and `_launch_failed` reads why here
            log_path = self.folder / f"trial-{trial.number}.launch.log"
            runner = Runner(self.settings)
            if self.fork_trials:
                return runner.fork(spec, options, log=log_path, close=self._inherited(), store=self.store)[1]
            return runner.start(spec, options, log=log_path)[1]
        except BaseException:
            with contextlib.suppress(OSError):
                shutil.rmtree(run_dir)  # nothing was launched: a resume must not wait for it
            raise

    def _launch_failed(self, live: _Live) -> None:
        """`phalanx run --detach` exited without creating the experiment: a failed trial, with why."""
        number = live.trial.number
        log_path = self.folder / f"trial-{number}.launch.log"
        try:
            message = log_path.read_text(errors="replace").strip()
        except OSError:
            message = ""
        status = live.launch.returncode if live.launch else None
        reason = f"could not start: {message or f'exit status {status}'}"
        # the run folder made before the launch (its launch file in it), if still there
        shutil.rmtree(self.settings.runs_dir / live.trial.experiment_id, ignore_errors=True)
        self.searcher.launch_failed(number)
        self.store.update_trial(
            self.group.id, number, state=TrialState.FAILED, reason=reason, finished_at=time.time()
        )
        self.say(f"trial {number}: {live.trial.experiment_id} {reason}")
        del self.live[number]

    def _launched(self, experiment_id: str) -> bool:
        """Whether a trial recorded as launching was launched (``launched``)."""
        return launched(self.settings.runs_dir / experiment_id, lambda: self._exists(experiment_id))

    def _exists(self, experiment_id: str) -> bool:
        try:
            self.store.get_experiment(experiment_id)
        except NotFound:
            return False
        return True

    # -- watching -------------------------------------------------------------------------------

    def _series(self, trial: Trial, metric: str | None = None) -> dict[int, float]:
        """step -> value of the metric the trial reported (the master's series, else the first)."""
        name = metric or (self.hp.metric.name if self.hp.metric else None)
        if name is None:
            return {}
        found = self.store.metrics(trial.experiment_id, title=name).get(name) or {}
        if not found:
            return {}
        key = "master" if "master" in found else sorted(found)[0]
        series = found[key]
        return {
            int(s): float(v)
            for s, v in zip(series.steps, series.values, strict=False)
            if v is not None and math.isfinite(float(v))
        }

    def _finals(self, trial: Trial) -> dict[str, float]:
        """The last value of each early-stopping metric the trial reported."""
        out: dict[str, float] = {}
        for rule in self.hp.early_stopping:
            values = self._series(trial, rule.metric)
            if values:
                out[rule.metric] = values[max(values)]
        return out

    def _watch(self) -> bool:
        """One pass over the running trials; True when one ended (a slot is free). The trials whose
        experiment has ended are handled first (reads only until then): the wake-up is for them,
        and their slot is what the next trial waits for."""
        ended = False
        found: list[tuple[int, _Live, Experiment | None]] = []
        for number, live in list(self.live.items()):
            try:
                found.append((number, live, self.store.get_experiment(live.trial.experiment_id)))
            except NotFound:
                found.append((number, live, None))
        found.sort(key=lambda item: not (item[2] is not None and item[2].status.done))
        for number, live, got in found:
            trial = live.trial
            if got is not None:
                exp = got
            else:  # its supervisor has not created it yet, or the launch failed
                failed = live.launch is not None and live.launch.poll() not in (None, 0)
                if failed and not self._exists(trial.experiment_id):
                    self._launch_failed(live)
                    ended = True
                continue
            if not live.seen:
                live.seen = True
                self.store.link_experiment(trial.experiment_id, self.group.id)
                if live.freed_at is not None:
                    self.launch_seconds.append(time.monotonic() - live.freed_at)
            if live.launch is not None and live.launch.poll() is not None:
                live.launch = None  # reaped
            if not exp.status.done and live.launch is None:  # its supervisor SIGKILLed: it ended
                exp = settle(self.store, self.settings, exp)
            ops = self.searcher.report(number, self._series(trial), ended=exp.status.done)
            last = self.searcher.last(number)
            if last is not None and last != live.recorded:  # a write only when it moved on
                self.store.update_trial(self.group.id, number, value=last[1], step=last[0])
                live.recorded = last
            if ops:
                for op in ops:
                    assert isinstance(op, core.Prune)
                    self._prune(op)
                ended = True
                continue
            if exp.status.done:
                if exp.finished_at:
                    self.notice_seconds.append(max(0.0, time.time() - exp.finished_at))
                self._ended(live, exp)
                ended = True
        return ended

    def _prune(self, op: core.Prune) -> None:
        """Carry out the core's decision: stop the trial's experiment, record it pruned."""
        from phalanx.supervisor import stop_experiment  # why: `phalanx group ls|get`: no supervisor

        live = self.live[op.number]
        t0 = time.monotonic()
        decided_at = time.time()
        exp = self.store.get_experiment(live.trial.experiment_id)
        if not exp.status.done:  # (one a killed controller decided to prune may have ended since)
            stop_experiment(self.store, self.settings, exp, timeout=30, reason=op.reason)
            self.store.update_experiment(exp.id, reason=op.reason)
        self.searcher.pruned(op.number)
        self.store.update_trial(
            self.group.id,
            op.number,
            state=TrialState.PRUNED,
            reason=op.reason,
            value=op.value,
            step=op.step,
            finished_at=time.time(),
            internal={**live.trial.internal, "pruned_at": decided_at},
        )
        self.say(
            f"trial {op.number}: {live.trial.experiment_id} {op.reason}"
            f" (stopped in {time.monotonic() - t0:.1f} s)"
        )
        del self.live[op.number]

    def _ended(self, live: _Live, exp: Experiment) -> None:
        number, exp_id = live.trial.number, live.trial.experiment_id
        status = str(exp.status)
        finals = self._finals(live.trial) if status == "succeeded" else {}
        out = self.searcher.ended(number, status, exp.reason, finals)
        record: TrialUpdate = {"state": out.state, "finished_at": time.time()}
        if out.state is TrialState.DONE and out.value is not None:
            record["value"] = out.value
            metric = self.hp.metric.name if self.hp.metric else "metric"
            said = f"succeeded ({metric} {out.value:.4g})"
        elif out.missing_metric:
            record["reason"] = self._no_metric(live.trial)
            said = f"succeeded but {record['reason']}"
        elif out.state is TrialState.PRUNED:
            record["reason"] = out.reason
            said = str(out.reason)
        else:
            record["reason"] = out.reason
            said = f"{status}: {out.reason or ''}"
            if status == "failed":
                said += f" (`phalanx logs {exp_id}` shows why)"
        self.store.update_trial(self.group.id, number, **record)
        self.say(f"trial {number}: {exp_id} {said}")
        del self.live[number]

    # -- reasons -------------------------------------------------------------------------------

    def _no_metric(self, trial: Trial) -> str:
        """Why a trial that succeeded has no value, with what it did report: a metric name that the
        script never logs (`acc` for `accuracy`) otherwise wastes the whole search unnoticed."""
        if self.hp.metric is None:
            return "no metric to compare"
        name = self.hp.metric.name
        try:
            titles = self.store.metric_titles(trial.experiment_id)
        except NotFound:
            titles = {}
        own = sorted(t for t in titles if t != name and not t.startswith("system/"))
        if not own:
            example = f"phalanx.log_metrics(step=..., {name}=...)"
            return f"reported no {name} (nor any other metric): log it, e.g. {example}"
        shown = ", ".join(own[:8]) + (", ..." if len(own) > 8 else "")
        close = difflib.get_close_matches(name, own, 1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return f"reported no {name}; it reported {shown}{hint}: fix hptuning.metric.name in the group file"

    # -- ending ---------------------------------------------------------------------------------

    def _stop_trials(self, reason: str) -> None:
        for live in self.live.values():
            launch = live.launch
            if launch is not None:  # a supervisor still starting: let it create the experiment, then stop it
                deadline = time.monotonic() + LAUNCH_TIMEOUT
                while not self._exists(live.trial.experiment_id) and launch.poll() is None:
                    if time.monotonic() > deadline:
                        launch.terminate()
                        break
                    time.sleep(0.1)
        found: dict[int, Any] = {}
        for number, live in self.live.items():
            try:
                found[number] = self.store.get_experiment(live.trial.experiment_id)
            except NotFound:
                found[number] = None
        for exp in found.values():  # a launch that finished only now was never seen by _watch
            if exp is not None:
                self.store.link_experiment(exp.id, self.group.id)
        stop_all(self.store, self.settings, [e for e in found.values() if e is not None], reason, timeout=30)
        for number in list(self.live):
            exp = found[number]
            ended = None
            if exp is not None and exp.status.done:  # it ended on its own, before this stop
                ended = ended_while_unwatched(self.store, self.group, self.live[number].trial)
            if ended is not None:
                self.searcher.stopped(number, ended["state"], ended.get("value"))
                self.store.update_trial(self.group.id, number, **ended)
                del self.live[number]
                continue
            state = TrialState.FAILED if exp is None else TrialState.STOPPED
            self.searcher.stopped(number, state)
            self.store.update_trial(
                self.group.id, number, state=state, reason=reason, finished_at=time.time()
            )
            if exp is not None:  # say it: early stopping or Ctrl-C ended this trial, not its own end
                self.say(f"trial {number}: {exp.id} stopped ({reason})")
            del self.live[number]

    def _stop_group(self, op: core.StopGroup) -> Group:
        """Stop every running trial (``op.trials_reason`` is what their experiments record), then
        end the group."""
        self._stop_trials(op.trials_reason)
        return self._finish(op.status, op.reason)

    def _finish(self, status: GroupStatus, reason: str | None) -> Group:
        self.store.update_group(
            self.group.id,
            status=status,
            reason=reason,
            finished_at=time.time(),
            controller_pid=None,
        )
        self.group = self.store.get_group(self.group.id)
        trials = self.store.list_trials(self.group.id)
        best = best_trial(trials, self.group.optimization)
        tail = f": {reason}" if reason else ""
        self.say(f"group {self.group.id} {status}{tail}")
        if best is None and self.group.metric and any(t.state is TrialState.DONE for t in trials):
            metric, gid = self.group.metric, self.group.id
            self.say(f"no best trial: no trial reported {metric} (`phalanx group get {gid}` says why)")
        if best is not None:
            shown = ", ".join(f"{k}={v}" for k, v in best.params.items())
            self.say(
                f"best: trial {best.number} ({best.experiment_id})"
                f" {self.group.metric} {best.value:.4g} ({shown})"
            )
        return self.group


__all__ = [
    "LAUNCH_TIMEOUT",
    "POLL_SECONDS",
    "Controller",
    "ControllerRunning",
    "GroupError",
    "build_trials_env",
    "check_trials_can_run",
    "create",
    "dumps",
    "stop_all",
    "stop_group",
    "trial_build",
]
