"""Experiments whose recorder died: found by the next reader and given a final status.

An experiment's end is recorded by the process that watched it: `phalanx run`'s supervisor, or the
Task of a plain ``python script.py``. If that process is SIGKILLed (or the OOM killer takes it, or it
segfaults) nothing records the end and the experiment would stay `running` forever. Every CLI read
command (after its ingest pass, which applies an outcome a supervisor left in the spool while the
store was down) therefore looks at this machine's unfinished experiments: one whose supervisor (pid
and start time from ``runs/<id>/supervisor.pid``) or whose script processes are gone is marked
failed, with what is known of how it died. A pid now used by another process is told apart by its
start time. Experiments of other machines are left alone (their processes cannot be seen here).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from phalanx.domain import ExperimentStatus, ReplicaState
from phalanx.procs import recorded_but_gone, start_time

if TYPE_CHECKING:
    from phalanx.config import Settings
    from phalanx.domain import Experiment, Replica
    from phalanx.store.base import Store

log = logging.getLogger(__name__)

FAULT_FILE = "fault-{pid}.txt"  # where a plain script's faulthandler writes a crash (spool folder)


def process_start(pid: int) -> float | None:
    """When process ``pid`` started (seconds since the epoch), None if it does not run (or is a zombie)."""
    ticks = start_time(pid)
    if ticks is None:
        return None
    try:
        btime = next(
            int(line.split()[1])
            for line in Path("/proc/stat").read_text().splitlines()
            if line.startswith("btime")
        )
    except (OSError, IndexError, ValueError, StopIteration):
        return None
    return btime + ticks / os.sysconf("SC_CLK_TCK")


def clean_aborted_starts(store: Store, settings: Settings) -> list[str]:
    """Folders of experiments whose `phalanx run` was killed before it recorded them (it opens the
    store only once the replicas are starting): with the supervisor gone and no experiment in the
    store, its run folder and spool are removed, so nothing of an experiment that never appears is
    left (nor ingested later as rows of no experiment). Run before an ingest pass."""
    from phalanx.errors import NotFound

    removed: list[str] = []
    runs = settings.runs_dir
    if not runs.is_dir():
        return removed
    for pid_file in runs.glob("*/supervisor.pid"):
        folder = pid_file.parent
        if recorded_but_gone(pid_file) is None:
            continue
        try:
            store.get_experiment(folder.name)
            continue
        except NotFound:
            pass
        import shutil

        for attempt in sorted((folder / "attempts").glob("*/state.json")):  # its local replicas
            with contextlib.suppress(Exception):
                _end_handle(settings, f"{folder.name}:{attempt.parent.name}")
        for path in (folder, settings.spool_dir / folder.name):
            shutil.rmtree(path, ignore_errors=True)
        removed.append(folder.name)
        log.warning("removed what a killed `phalanx run` left of experiment %s (never recorded)", folder.name)
    return removed


def reconcile(store: Store, settings: Settings) -> list[str]:
    """Mark this machine's orphaned unfinished experiments failed; returns their ids."""
    fixed = []
    here = socket.gethostname()
    for status in (ExperimentStatus.RUNNING, ExperimentStatus.STARTING, ExperimentStatus.BUILDING):
        from phalanx.store.base import ExperimentFilter

        for exp in store.list_experiments(ExperimentFilter(status=status, limit=500)).items:
            try:
                reason = orphan_reason(store, settings, exp, here)
                if reason:
                    _mark_failed(store, exp, reason, settings)
                    fixed.append(exp.id)
            except Exception as exc:  # one experiment's trouble must not stop a read command
                log.warning("checking experiment %s failed: %s", exp.id, exc)
    return fixed


class ReplicaLister(Protocol):
    """What judging an experiment needs of a store: its replicas (the full store, or the lean
    reader that `phalanx ls` uses when no upkeep is due: phalanx/readpass.py)."""

    def list_replicas(self, experiment_id: str) -> list[Replica]: ...


def orphan_reason(store: ReplicaLister, settings: Settings, exp: Experiment, here: str) -> str | None:
    """Why the unfinished experiment ``exp`` of this machine (``here``) has lost its recorder, or
    None while its supervisor or script still runs (or it is another machine's)."""
    if exp.backend == "script":
        pids = [r.pid for r in store.list_replicas(exp.id) if r.pid and r.host == here]
        if not pids or any(_runs_since(p, exp.created_at) for p in pids):
            return None
        pid = pids[0]
        crash = _fault_line(settings.spool_dir / exp.id, pid)
        if crash:
            return f"the script (pid {pid}) crashed: {crash}"
        return (
            f"the script (pid {pid}) ended without recording its end: killed by a signal it cannot "
            "catch (SIGKILL, the OOM killer) or crashed"
        )
    gone = recorded_but_gone(settings.runs_dir / exp.id / "supervisor.pid")
    if gone is None:
        return None
    return f"phalanx run (pid {gone}) was killed before it recorded the outcome"


def _runs_since(pid: int, created: float | None) -> bool:
    """Whether ``pid`` runs and is the process that created the experiment (not a reused pid)."""
    start = process_start(pid)
    if start is None:
        return False
    return created is None or start <= created + 2


def _fault_line(spool: Path, pid: int) -> str | None:
    """The first line Python's faulthandler wrote for a crash of ``pid`` ("Fatal Python error:
    Segmentation fault"), if any."""
    try:
        text = (spool / FAULT_FILE.format(pid=pid)).read_text(errors="replace")
    except OSError:
        return None
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0] if lines else None


def _end_leftovers(settings: Settings, exp: Experiment) -> None:
    """A local experiment whose supervisor is gone: end whatever its replicas left running before
    it is marked failed. Their leaders die with the supervisor (parent-death signal) and take their
    trees along, but a leader killed too leaves its processes to nobody; the engine finds them by
    their mark (backends.local.members) and its cancel returns once none runs."""
    if exp.backend != "local" or not exp.handle:
        return
    _end_handle(settings, exp.handle)


def _end_handle(settings: Settings, handle: str) -> None:
    from phalanx.backends.local.engine import LocalBackend

    LocalBackend(settings).cancel(handle)


def _mark_failed(store: Store, exp: Experiment, reason: str, settings: Settings) -> None:
    try:
        _end_leftovers(settings, exp)
    except Exception as exc:  # marking it failed matters more
        log.warning("ending what experiment %s left running failed: %s", exp.id, exc)
    now = time.time()
    for r in store.list_replicas(exp.id):
        if not ReplicaState(r.state).done:
            store.update_replica(exp.id, r.name, state=ReplicaState.FAILED, reason=reason, finished_at=now)
    store.update_experiment(exp.id, status=ExperimentStatus.FAILED, reason=reason, finished_at=now)
    log.warning("experiment %s: %s; marked failed", exp.id, reason)


def settle(store: Store, settings: Settings, exp: Experiment) -> Experiment:
    """One unfinished experiment, as ``reconcile`` and ``queue.reconcile`` judge it: the same
    experiment, or its final state when its `phalanx run` is gone (SIGKILLed running: failed; while
    queued: stopped). For a watcher that polls a few experiments (a group's controller): a trial
    whose supervisor was killed used to stay `running` until some `phalanx ls` looked."""
    if exp.status in (ExperimentStatus.RUNNING, ExperimentStatus.STARTING, ExperimentStatus.BUILDING):
        reason = orphan_reason(store, settings, exp, socket.gethostname())
        if reason:
            fresh = store.get_experiment(exp.id)  # it may have recorded its end since it was read
            if fresh.status.done:
                return fresh
            _mark_failed(store, fresh, reason, settings)
            return store.get_experiment(exp.id)
    elif exp.status is ExperimentStatus.QUEUED:
        from phalanx import queue

        if queue.stop_if_abandoned(store, settings, exp.id):
            return store.get_experiment(exp.id)
    return exp
