"""Stopping an experiment: the request (``write_stop_request``, the stop file; ``StopRequests``, how
its supervisor learns of it and why), and stopping from another process (`phalanx stop`, the
server's stop), its supervisor alive or not.

Only an experiment's supervisor writes its status while it lives. While it does, ``stop_experiment``
only leaves a stop request and waits. When the supervisor is gone (killed, its machine rebooted),
or does not finish in time, it cancels what the engine still runs and asks ``phalanx.reconcile``
(the one owner of an experiment's end) to decide and record it: STOPPED, with a reason that says
whether the supervisor (or the plain script) was gone.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING

from phalanx.backends.registry import get_backend
from phalanx.config import Settings
from phalanx.domain import ExperimentStatus
from phalanx.ends import Asker, Facts, decide
from phalanx.machine.procs import pid_alive, recorded_process
from phalanx.queue import ledger_for
from phalanx.reconcile import record_end

if TYPE_CHECKING:
    from phalanx.domain import Experiment
    from phalanx.store.base import Store

log = logging.getLogger(__name__)

SCRIPT_PID = "script.pid"  # runs/<id>/script.pid: the plain script's process (Task.init writes it)


def supervisor_pid(settings: Settings, experiment_id: str) -> int | None:
    """The pid of the `phalanx run` supervising this experiment, if it is still running: the one
    its ``runs/<id>/supervisor.pid`` records, with the same start time (not a reused pid)."""
    # pid and start time name the process for good; its command line is not asked: a trial's
    # supervisor forked from its group's controller carries the controller's (runner.forking)
    return recorded_process(settings.runs_dir / experiment_id / "supervisor.pid")


ON_REQUEST = "stopped on request"  # a stop request's reason when it gives none (`phalanx stop`, the UI)


def write_stop_request(settings: Settings, experiment_id: str, reason: str | None = None) -> Path:
    """Leave a stop request where the experiment's supervisor looks on every turn of its loop
    (``<runs>/<id>/stop``: the time, then ``reason`` if any), written whole (a temporary file
    renamed). Returns its path."""
    run_dir = settings.runs_dir / experiment_id
    run_dir.mkdir(parents=True, exist_ok=True)
    tmp = run_dir / "stop.tmp"
    tmp.write_text(f"{time.time()}\n{reason or ''}\n")
    return tmp.replace(run_dir / "stop")


class StopRequests:
    """What asks the experiment's supervisor to stop, and why: a signal (Ctrl-C, the SIGTERM that
    `phalanx stop` sends, SIGHUP from a closed terminal) or the stop file (``write_stop_request``),
    looked at on every turn of its loop. The first reason stands; one left with the request (a
    group's pruning says why) wins over the signal's."""

    def __init__(self, run_dir: Path) -> None:
        self.file = run_dir / "stop"
        self.reason: str | None = None

    def on_signal(self, signum: int, _frame: object) -> None:
        """The handler the supervisor installs for SIGINT, SIGTERM and SIGHUP."""
        if self.reason is None and self.file.exists():  # `phalanx stop`: the request, then the signal
            self.reason = requested_reason(self.file) or ON_REQUEST  # as a server's stop (the file alone)
        elif self.reason is None:
            self.reason = f"stopped by {signal.Signals(signum).name}"

    def requested(self) -> bool:
        """Whether a stop was asked for (a signal came, or the stop file is there)."""
        if self.reason is None and self.file.exists():
            self.reason = requested_reason(self.file) or ON_REQUEST
        return self.reason is not None

    def stopped_while_queued(self) -> None:
        """The stop came while the experiment waited in the machine's queue: it never ran, so "stopped
        by SIGTERM" (the signal `phalanx stop` sends) would tell the user less than the truth. A reason
        left with the request is kept as it is; else it says a stop request or the signal did it."""
        requested = requested_reason(self.file)
        if requested:
            self.reason = requested
            return
        how = (
            "a stop request" if self.file.exists() else (self.reason or "stopped").removeprefix("stopped by ")
        )
        self.reason = f"stopped while queued (by {how})"


def requested_reason(path: Path) -> str | None:
    """The reason written on the stop file's second line (a group's pruning says why), if any."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    return lines[1].strip() or None if len(lines) > 1 else None


def _stop_script(store: Store, settings: Settings, experiment: Experiment, timeout: float) -> Experiment:
    """SIGTERM the process of a plain script's experiment if it runs on this machine (its Task
    records the end), and wait for it to go. A script that is gone (killed) is simply marked.

    The pid comes only from ``runs/<id>/script.pid``, which Task.init wrote on this machine, and
    only while that process has the recorded start time. Never from the store: a replica's pid
    there arrived through ingest, and anyone who can call the API could have named any process."""
    pid = recorded_process(settings.runs_dir / experiment.id / SCRIPT_PID)
    running = [pid] if pid is not None else []
    for pid in running:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while any(pid_alive(pid) for pid in running) and time.monotonic() < deadline:
        time.sleep(0.2)
    return store.get_experiment(experiment.id)


def stop_experiment(
    store: Store, settings: Settings, experiment: Experiment, timeout: float = 60.0, reason: str | None = None
) -> ExperimentStatus:
    """Stop a running experiment from another process (`phalanx stop`): leave a stop request, signal
    its supervisor and wait for it to mark the experiment stopped. If its supervisor is gone (killed),
    cancel what the engine still runs and mark the experiment stopped here: the one case where
    another process than the supervisor writes its status (see the module docstring).
    ``reason`` (a group's pruning decision) replaces "stopped by phalanx stop" as the experiment's reason."""
    write_stop_request(settings, experiment.id, reason)
    pid = supervisor_pid(settings, experiment.id)
    if pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            current = store.get_experiment(experiment.id)
            if current.status.done:
                return current.status
            if supervisor_pid(settings, experiment.id) is None:
                break
            time.sleep(0.2)
    current = store.get_experiment(experiment.id)
    if current.status.done:
        return current.status
    if current.backend == "script":  # a plain script's Task.init: no engine, only its process
        current = _stop_script(store, settings, current, timeout)
        if current.status.done:
            return current.status
    elif current.handle:
        cluster = None
        if current.cluster:
            from phalanx.clusters import get_cluster  # why: a cluster's run only (issue 42)

            cluster = get_cluster(current.cluster, settings.home)
        backend = get_backend(current.backend or "local", settings=settings, cluster=cluster)
        backend.cancel(current.handle)
    ledger_for(settings).release(experiment.id)  # a killed supervisor's place in the queue, if any
    asked = Facts(
        current.status,
        script=current.backend == "script",
        asker=Asker.STOP,
        reason=reason,
        supervised_stop=pid is not None,
    )
    end = decide(asked)
    if end is not None:
        record_end(store, experiment.id, end)
    return store.get_experiment(experiment.id).status
