"""The group controller: ask the search for values, launch each trial as a whole experiment, watch
its metric in the store, prune it, and finish the search.

Every trial goes through `phalanx run --detach` (the same launch path, engine choice and machine
ledger as any experiment), with an experiment id the controller recorded in ``group_trials`` first.
The controller keeps nothing that is not in the store: after a SIGKILL, ``Controller(...).run()``
from `phalanx group resume` rebuilds the Optuna study from the finished trials, adopts the running
ones and launches only what is still missing, so the planned number of trials runs exactly once.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import logging
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from phalanx.config import Settings
from phalanx.domain import Framework
from phalanx.errors import NotFound, PhalanxError
from phalanx.groups.records import Group, Trial, TrialUpdate, best_trial
from phalanx.spec.group import GroupSpec, load_group_text
from phalanx.spec.model import Build, ExperimentSpec
from phalanx.store.base import GroupStore

log = logging.getLogger(__name__)

POLL_SECONDS = 0.3
LAUNCH_TIMEOUT = 180.0
TRIAL_PARAMS = "Trial"  # the section of `phalanx params TRIAL` holding its sampled values


class GroupError(PhalanxError):
    code = "group_error"


@dataclass
class _Live:
    """A trial the controller is watching, with its Optuna trial and the steps already reported."""

    trial: Trial
    optuna_trial: Any
    launch: subprocess.Popen[bytes] | None = None  # its supervisor, until seen ended (reaped)
    freed_at: float | None = None  # monotonic time the slot it took was freed (controller overhead)
    seen: bool = False  # its experiment row has been seen
    reported: set[int] = field(default_factory=set)
    last: tuple[int, float] | None = None
    best: float | None = None


def create(
    store: GroupStore,
    group: GroupSpec,
    *,
    workdir: Path | None,
    params: dict[str, Any] | None = None,
    cluster: str | None = None,
    oversubscribe: bool = False,
    allow_unused: bool = False,
    extra_params: bool = False,
) -> Group:
    """Record a new group (status created); ``Controller(...).run()`` then runs it."""
    base = group.base
    source = Path(base.source_file) if base.source_file else None
    name = base.name or (source.stem if source else "group")
    hp = group.hptuning
    return store.create_group(
        name=name,
        project=base.project or "default",
        search=hp.search.kind,
        planned=hp.planned_trials(),
        concurrency=hp.concurrency,
        metric=hp.metric.name if hp.metric else None,
        optimization=hp.metric.optimization if hp.metric else None,
        spec_text=base.source_text or "",
        source_file=str(source) if source else None,
        workdir=str((workdir or (source.parent if source else Path.cwd())).resolve()),
        options={
            "params": dict(params or {}),
            "cluster": cluster,
            "oversubscribe": oversubscribe,
            "allow_unused": allow_unused,
            "extra_params": extra_params,
        },
    )


def check_trials_can_run(
    group: GroupSpec,
    settings: Settings,
    *,
    cluster: str,
    workdir: Path | None,
    oversubscribe: bool = False,
) -> None:
    """Before a group on a cluster is recorded: prepare one trial (the example values `phalanx
    check` shows) as its `phalanx run` would, without building or starting anything, and ask the
    engine whether it could ever run it (Slurm: ``sbatch --test-only``). A search whose every trial
    Slurm would refuse is a UsageError here (exit 2, nothing recorded), not N failed trials."""
    from phalanx.errors import UsageError
    from phalanx.spec.group import example_values
    from phalanx.supervisor.preparing import prepare

    values = example_values(group)
    spec = group.trial_spec(values)  # (--param overrides are in the group's params already)
    source = group.base.source_file
    try:
        prepared = prepare(
            spec,
            settings=settings,
            workdir=workdir or (Path(source).parent if source else None),
            cluster=cluster,
            oversubscribe=oversubscribe,
            dry=True,
        )
        refuse = getattr(prepared.backend, "refuse_if_it_can_never_run", None)
        if refuse is not None:
            refuse(prepared.dry_run)
    except UsageError as exc:
        shown = ", ".join(f"{k}={v}" for k, v in values.items())
        raise UsageError(
            f"{source or 'the group'}: its trials cannot run (a trial with {shown}): {exc}"
        ) from None


def trial_build(spec: ExperimentSpec, base_dir: Path) -> Build:
    """A trial's build section with its files named from the group file's folder (the trial's own
    file lives under PHALANX_HOME/groups/ID)."""
    build = spec.build
    if build.requirements and not Path(build.requirements).is_absolute():
        build = replace(build, requirements=str(base_dir / build.requirements))
    if build.dockerfile and not Path(build.dockerfile).is_absolute():
        build = replace(build, dockerfile=str(base_dir / build.dockerfile))
    return build


def build_trials_env(group: GroupSpec, settings: Settings, *, workdir: Path | None) -> None:
    """Before a group on this machine is recorded: build the trials' environment (their `build`
    section, the same for every trial) once. A build that fails is a UsageError here (exit 2,
    nothing recorded), not every trial building it again in turn and failing the same way; one
    that succeeds is cached, so the trials start at once instead of queueing on its lock."""
    from phalanx import buildenv
    from phalanx.errors import SpecError, UsageError
    from phalanx.plan import build_plan
    from phalanx.spec.group import example_values
    from phalanx.supervisor.preparing import interpreter

    source = group.base.source_file
    base_dir = Path(source).parent if source else Path.cwd()
    spec = group.trial_spec(example_values(group))
    spec = replace(spec, build=trial_build(spec, base_dir))
    if not buildenv.wants_env(spec.build) and spec.framework is not Framework.HOROVOD:
        return
    folder = str((workdir or base_dir).resolve())
    try:
        plan = build_plan(spec)
        sys.stderr.write("phalanx: building the trials' environment (once, for every trial) ...\n")
        interpreter(plan, folder, settings)
    except SpecError:
        return  # the trial's own launch says what is wrong with it, as before
    except UsageError as exc:
        raise UsageError(f"{source or 'the group'}: the trials' environment cannot be built: {exc}") from None


def load(group: Group) -> GroupSpec:
    """The GroupSpec of a recorded group, from the text stored with it (the file may have changed)."""
    spec = load_group_text(
        group.spec_text,
        group.source_file or "group.yml",
        params=dict(group.options.get("params") or {}),
        allow_unused=bool(group.options.get("allow_unused")),
        extra_params=bool(group.options.get("extra_params")),
    )
    return replace(spec, base=replace(spec.base, source_file=group.source_file))


def controller_alive(group: Group) -> bool:
    """Whether the group's controller still runs (on this machine; another host's is trusted)."""
    if group.controller_pid is None:
        return False
    if group.controller_host and group.controller_host != socket.gethostname():
        return True
    from phalanx.procs import pid_alive

    if not pid_alive(group.controller_pid):
        return False
    try:
        cmdline = Path(f"/proc/{group.controller_pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"phalanx" in cmdline and group.controller_pid != os.getpid()


class Controller:
    """Runs (or resumes) one group to its end. ``say`` prints progress (the CLI passes a printer)."""

    def __init__(
        self,
        store: GroupStore,
        settings: Settings,
        group_id: str,
        say: Callable[[str], None] | None = None,
    ) -> None:
        self.store = store
        self.settings = settings
        self.group = store.get_group(group_id)
        self.spec = load(self.group)
        self.hp = self.spec.hptuning
        self.say = say or (lambda text: log.info("%s", text))
        self.live: dict[int, _Live] = {}
        self.interrupted: str | None = None
        self.launch_seconds: list[float] = []  # slot free -> next trial's experiment exists (bench)
        self.notice_seconds: list[float] = []  # a trial's end in the store -> the controller saw it
        self.folder = settings.home / "groups" / self.group.id
        from phalanx.groups import search

        self.search = search
        self.study = search.make_study(
            self.hp, self.group.id, resumed_after=store.count_trials(self.group.id)
        )

    # -- the loop -------------------------------------------------------------------------------

    def run(self, handle_signals: bool = True) -> Group:
        g = self.group
        if g.done:
            return g
        previous = self._install_signals() if handle_signals else {}
        try:
            self.store.update_group(
                g.id,
                status="running",
                controller_pid=os.getpid(),
                controller_host=socket.gethostname(),
            )
            self._restore()
            return self._loop()
        finally:
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
                return self._stop(self.interrupted or "stopped by phalanx group stop")
            ended = self._watch()
            if ended:
                freed_at = time.monotonic()
            reached = self._early_stop_reached()
            if reached:
                self._stop_trials(f"group early stopping: {reached}")
                return self._finish("succeeded", f"early stopping: {reached}")
            started = self.store.count_trials(self.group.id)
            while len(self.live) < self.hp.concurrency and started < self.group.planned:
                self._launch_next(started, freed_at)
                freed_at = None
                started += 1
                if self.interrupted:
                    break
            if not self.live and started >= self.group.planned:
                trials = self.store.list_trials(self.group.id)
                ok = [t for t in trials if t.state in ("done", "pruned")]
                if not ok and trials:
                    return self._finish("failed", "every trial failed")
                return self._finish("succeeded", None)
            time.sleep(POLL_SECONDS)

    # -- resuming -------------------------------------------------------------------------------

    def _restore(self) -> None:
        """Replay finished trials into the study; adopt (or launch) the unfinished ones."""
        for t in self.store.list_trials(self.group.id):
            internal = dict(t.internal.get("params") or {})
            if t.state in ("done", "pruned", "failed", "stopped"):
                self.search.replay(self.study, self.hp, internal, t.state, t.value, self._series(t))
                continue
            self.study.enqueue_trial(internal, skip_if_exists=False)
            ot = self.study.ask()
            self.search.sample(ot, self.hp)  # the enqueued values: the same params again
            live = _Live(t, ot)
            self.live[t.number] = live
            if not self._launched(t.experiment_id):
                self.say(
                    f"trial {t.number}: relaunching {t.experiment_id}"
                    " (the controller stopped before it started)"
                )
                live.launch = self._start_experiment(t)
            self.store.update_trial(self.group.id, t.number, state="running")
            self.store.link_experiment(t.experiment_id, self.group.id)
            self.say(f"trial {t.number}: {t.experiment_id} still running, watching it again")

    # -- launching ------------------------------------------------------------------------------

    def _launch_next(self, number: int, freed_at: float | None) -> None:
        ot = self.study.ask()
        values = self.search.sample(ot, self.hp)
        s = self.hp.search
        if s.resource and s.max_iter:
            values[s.resource] = int(s.max_iter) if s.resource_type == "int" else float(s.max_iter)
        trial = Trial(
            group_id=self.group.id,
            number=number,
            experiment_id=uuid.uuid4().hex[:12],
            params=values,
            state="launching",
            internal={"params": dict(ot.params)},
        )
        self.store.add_trial(trial)  # first: a crash from here on is resumed, not repeated
        launch = self._start_experiment(trial)
        self.store.update_trial(self.group.id, number, state="running")
        shown = ", ".join(f"{k}={v}" for k, v in values.items())
        self.say(f"trial {number}: {trial.experiment_id} starting ({shown})")
        self.live[number] = _Live(replace(trial, state="running"), ot, launch=launch, freed_at=freed_at)

    def _trial_spec(self, trial: Trial) -> ExperimentSpec:
        """The trial's validated spec: the group's experiment with the sampled values as its params
        (recorded as its launch params: `phalanx get`, rerun). Its text is also written to
        groups/ID/trial-N.yml, what `phalanx rerun`/`resume` of the trial read back."""
        spec = self.spec.trial_spec(trial.params)
        base_dir = (
            Path(self.group.source_file).parent if self.group.source_file else Path(self.group.workdir or ".")
        )
        spec = replace(spec, build=trial_build(spec, base_dir), name=f"{self.group.name}-{trial.number}")
        from phalanx.spec.dump import spec_to_yaml

        text = spec_to_yaml(spec)
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"trial-{trial.number}.yml"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(path)
        return replace(
            spec, source_file=str(path), source_text=text, launch_params=dict(trial.params), notes=()
        )

    def _start_experiment(self, trial: Trial) -> subprocess.Popen[bytes]:
        """Start the trial's supervisor (the Runner, from the trial's spec object) with the id
        recorded for this trial; not waited for here (``_watch`` sees the experiment appear, or the
        supervisor end without creating it), so the other trials are watched meanwhile."""
        from phalanx.runner import LaunchOptions, LaunchRecord, Runner

        spec = self._trial_spec(trial)
        options = LaunchOptions(
            workdir=Path(self.group.workdir).resolve() if self.group.workdir else None,
            cluster=str(self.group.options["cluster"]) if self.group.options.get("cluster") else None,
            oversubscribe=bool(self.group.options.get("oversubscribe")),
            experiment_id=trial.experiment_id,
            record=LaunchRecord(file=spec.source_file, params=dict(trial.params)),
            params_section=TRIAL_PARAMS,
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
            _, proc, _ = Runner(self.settings).start(
                spec, options, log=self.folder / f"trial-{trial.number}.launch.log"
            )
            return proc
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
        op = self.search.optuna()
        self.search.tell(self.study, live.optuna_trial, state=op.trial.TrialState.FAIL)
        self.store.update_trial(self.group.id, number, state="failed", reason=reason, finished_at=time.time())
        self.say(f"trial {number}: {live.trial.experiment_id} {reason}")
        del self.live[number]

    def _launched(self, experiment_id: str) -> bool:
        """Whether a trial recorded as launching was launched: its experiment exists, or appears
        while the `phalanx run --detach` the killed controller had started is still creating it."""
        if self._exists(experiment_id):
            return True
        if not (self.settings.runs_dir / experiment_id).exists():
            return False  # the launch never began (the folder is made before it starts)
        deadline = time.monotonic() + LAUNCH_TIMEOUT
        while time.monotonic() < deadline:
            if self._exists(experiment_id):
                return True
            if not (self.settings.runs_dir / experiment_id).exists():
                return False  # it failed and cleaned up: launch it again
            time.sleep(0.2)
        return False

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

    def _watch(self) -> bool:
        """One pass over the running trials; True when one ended (a slot is free)."""
        ended = False
        for number, live in list(self.live.items()):
            trial = live.trial
            try:
                exp = self.store.get_experiment(trial.experiment_id)
            except NotFound:  # its supervisor has not created it yet, or the launch failed
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
                from phalanx.reconcile import settle

                exp = settle(self.store, self.settings, exp)
            values = self._series(trial)
            prune = False
            for step in sorted(values):
                if step in live.reported:
                    continue
                live.optuna_trial.report(values[step], step)
                live.reported.add(step)
                live.last = (step, values[step])
                # asked at every step, not once a poll: a rung compares the values at its own step,
                # however many steps arrived since the last poll
                if self.hp.pruning is not None and not exp.status.done and live.optuna_trial.should_prune():
                    prune = True
                    break
            if live.last is not None:
                self.store.update_trial(self.group.id, number, value=live.last[1], step=live.last[0])
            if prune:
                self._prune(live)
                ended = True
                continue
            if exp.status.done:
                if exp.finished_at:
                    self.notice_seconds.append(max(0.0, time.time() - exp.finished_at))
                self._ended(live, exp.status.value, exp.reason)
                ended = True
        return ended

    def _prune(self, live: _Live) -> None:
        assert live.last is not None and self.hp.pruning is not None
        step, value = live.last
        reason = f"pruned at step {step}: {self._why(live, step, value)}"
        from phalanx.supervisor import stop_experiment

        t0 = time.monotonic()
        decided_at = time.time()
        exp = self.store.get_experiment(live.trial.experiment_id)
        stop_experiment(self.store, self.settings, exp, timeout=30, reason=reason)
        self.store.update_experiment(exp.id, reason=reason)
        op = self.search.optuna()
        self.search.tell(self.study, live.optuna_trial, state=op.trial.TrialState.PRUNED)
        self.store.update_trial(
            self.group.id,
            live.trial.number,
            state="pruned",
            reason=reason,
            value=value,
            step=step,
            finished_at=time.time(),
            internal={"params": dict(live.optuna_trial.params), "pruned_at": decided_at},
        )
        self.say(
            f"trial {live.trial.number}: {live.trial.experiment_id} {reason}"
            f" (stopped in {time.monotonic() - t0:.1f} s)"
        )
        del self.live[live.trial.number]

    def _why(self, live: _Live, step: int, value: float) -> str:
        p = self.hp.pruning
        assert p is not None
        name = p.metric.name
        if p.kind == "median":
            op = self.search.optuna()
            others = [
                t.intermediate_values[step]
                for t in self.study.get_trials(deepcopy=False, states=(op.trial.TrialState.COMPLETE,))
                if step in t.intermediate_values
            ]
            if others:
                import statistics

                sign = "<" if p.metric.maximize else ">"
                return f"{name} {value:.4g} {sign} median {statistics.median(others):.4g}"
            return f"{name} {value:.4g}"
        how = p.kind.replace("_", " ")
        return f"{name} {value:.4g} not in the best 1/{p.reduction_factor} of the trials at this rung ({how})"

    def _ended(self, live: _Live, status: str, reason: str | None) -> None:
        op = self.search.optuna()
        value = live.last[1] if live.last else None
        number = live.trial.number
        exp_id = live.trial.experiment_id
        record: TrialUpdate = {
            "finished_at": time.time(),
            "internal": {"params": dict(live.optuna_trial.params)},
        }
        if status == "succeeded" and value is not None:
            self.search.tell(self.study, live.optuna_trial, value)
            record["state"], record["value"] = "done", value
            metric = self.hp.metric.name if self.hp.metric else "metric"
            said = f"succeeded ({metric} {value:.4g})"
        else:
            if status == "succeeded":
                outcome, state = op.trial.TrialState.FAIL, "done"
                reason = self._no_metric(live.trial)
                said = f"succeeded but {reason}"
            elif status == "stopped" and (reason or "").startswith("pruned at step"):
                # pruned by a controller that was killed before it recorded the decision
                outcome, state, said = op.trial.TrialState.PRUNED, "pruned", str(reason)
            else:
                outcome, state, said = op.trial.TrialState.FAIL, "failed", f"{status}: {reason or ''}"
                if status == "failed":
                    said += f" (`phalanx logs {exp_id}` shows why)"
            self.search.tell(self.study, live.optuna_trial, state=outcome)
            record["state"], record["reason"] = state, reason
        self.store.update_trial(self.group.id, number, **record)
        self.say(f"trial {number}: {exp_id} {said}")
        del self.live[number]

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

    def _early_stop_reached(self) -> str | None:
        rules = self.hp.early_stopping
        if not rules:
            return None
        for t in self.store.list_trials(self.group.id):
            if t.state != "done":
                continue
            for rule in rules:
                values = self._series(t, rule.metric)
                if values:
                    last = values[max(values)]
                    if rule.reached(last):
                        sign = ">=" if rule.optimization == "maximize" else "<="
                        return f"trial {t.number} reached {rule.metric} {last:.4g} {sign} {rule.value:g}"
        return None

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
                ended = _ended_while_unwatched(self.store, self.group, self.live[number].trial)
            if ended is not None:
                self.store.update_trial(self.group.id, number, **ended)
                del self.live[number]
                continue
            self.store.update_trial(
                self.group.id,
                number,
                state="failed" if exp is None else "stopped",
                reason=reason,
                finished_at=time.time(),
            )
            if exp is not None:  # say it: early stopping or Ctrl-C ended this trial, not its own end
                self.say(f"trial {number}: {exp.id} stopped ({reason})")
            del self.live[number]

    def _stop(self, reason: str) -> Group:
        self._stop_trials(reason)
        return self._finish("stopped", reason)

    def _finish(self, status: str, reason: str | None) -> Group:
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
        if best is None and self.group.metric and any(t.state == "done" for t in trials):
            metric, gid = self.group.metric, self.group.id
            self.say(f"no best trial: no trial reported {metric} (`phalanx group get {gid}` says why)")
        if best is not None:
            shown = ", ".join(f"{k}={v}" for k, v in best.params.items())
            self.say(
                f"best: trial {best.number} ({best.experiment_id})"
                f" {self.group.metric} {best.value:.4g} ({shown})"
            )
        return self.group


def group_json(store: GroupStore, group: Group) -> dict[str, Any]:
    """`phalanx group get -o json` and the API: the group, its trials and the best one."""
    trials = store.list_trials(group.id)
    best = best_trial(trials, group.optimization)
    doc = group.to_json()
    doc["trials"] = [t.to_json() for t in trials]
    doc["best"] = best.to_json() if best else None
    doc["counts"] = {
        s: sum(1 for t in trials if t.state == s) for s in ("running", "done", "pruned", "failed", "stopped")
    }
    return doc


def stop_group(store: GroupStore, settings: Settings, group: Group, timeout: float = 60.0) -> Group:
    """`phalanx group stop`: ask the controller; if none runs, stop the running trials here."""
    store.update_group(group.id, stop_requested=True)
    if controller_alive(group):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            current = store.get_group(group.id)
            if current.done:
                return current
            if not controller_alive(current):
                break
            time.sleep(0.2)
    current = store.get_group(group.id)
    if current.done:
        return current
    reason = "stopped by phalanx group stop"
    unfinished = [t for t in store.list_trials(group.id) if t.state in ("launching", "running")]
    experiments = []
    for t in unfinished:
        with contextlib.suppress(NotFound):  # its launch never created it
            experiments.append(store.get_experiment(t.experiment_id))
            store.link_experiment(t.experiment_id, group.id)  # a controller killed before it saw it
    stop_all(store, settings, experiments, reason, timeout=timeout)
    for t in unfinished:
        ended = _ended_while_unwatched(store, current, t)
        if ended is not None:  # the controller was dead when this trial finished: keep its outcome
            store.update_trial(group.id, t.number, **ended)
            continue
        store.update_trial(group.id, t.number, state="stopped", reason=reason, finished_at=time.time())
    store.update_group(
        group.id, status="stopped", reason=reason, finished_at=time.time(), controller_pid=None
    )
    return store.get_group(group.id)


def _ended_while_unwatched(store: GroupStore, group: Group, trial: Trial) -> TrialUpdate | None:
    """A trial recorded as running whose experiment had already ended before `group stop` (its
    controller killed, nobody watching): succeeded with the metric is `done` with its last value (it
    can be the best trial), failed is `failed`; None when the stop is what ended it."""
    try:
        exp = store.get_experiment(trial.experiment_id)
    except NotFound:
        return None
    status = str(exp.status)
    finished = exp.finished_at or time.time()
    if status == "failed":
        return {"state": "failed", "reason": exp.reason, "finished_at": finished}
    if status != "succeeded" or not group.metric:
        return None
    found = store.metrics(trial.experiment_id, title=group.metric).get(group.metric) or {}
    if not found:
        return None
    series = found["master" if "master" in found else sorted(found)[0]]
    points = [
        (int(st), float(v))
        for st, v in zip(series.steps, series.values, strict=False)
        if v is not None and math.isfinite(float(v))
    ]
    if not points:
        return None
    step, value = max(points)
    return {"state": "done", "value": value, "step": step, "finished_at": finished}


def stop_all(
    store: GroupStore, settings: Settings, experiments: list[Any], reason: str, timeout: float
) -> None:
    """Stop these experiments all at once, not one after the other: each stop waits for its
    supervisor (on Slurm: scancel, then the job's end), and a trial still queued behind a running
    one must be cancelled before the running one's nodes free up and Slurm starts it."""
    from concurrent.futures import ThreadPoolExecutor

    from phalanx.supervisor import stop_experiment

    running = [e for e in experiments if not e.status.done]
    if not running:
        return
    with ThreadPoolExecutor(max_workers=min(16, len(running))) as pool:
        futures = [
            pool.submit(stop_experiment, store, settings, e, timeout=timeout, reason=reason) for e in running
        ]
        for f in futures:
            f.result()


def dumps(doc: Any) -> str:
    return json.dumps(doc, indent=2, default=str)
