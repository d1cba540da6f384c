"""The one owner of an experiment's end when its supervisor cannot decide it.

An experiment's end is recorded by the process that watched it: `phalanx run`'s supervisor, or the
Task of a plain ``python script.py``. When that process is gone (SIGKILLed, taken by the OOM killer,
a segfault, a reboot), when a user stops an experiment whose supervisor is gone, when a `phalanx
run` dies while it waits in the queue, or when ``submit()`` gives up on what it started, somebody
else must write the end. That somebody is this module, for all of them:

* ``phalanx.ends`` holds the rule (``decide(Facts) -> End | None``), what this machine can see
  (``facts``) and which experiments wait for an end (``pending_ends``): reading only.
* ``record_end(store, experiment_id, end)`` is the one writer: unfinished replicas first, then the
  experiment, and never over an end the supervisor recorded meanwhile.
* ``settle`` / ``reconcile`` / ``stop_abandoned`` put the three together
  for one experiment, for every unfinished one (the CLI's read commands, ``phalanx queue``, a
  group's controller, ``Runner.status``), and for the queue entries a supervisor reclaimed.

Experiments of other machines are left alone (their processes cannot be seen here).
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from phalanx.domain import ExperimentStatus, ReplicaState
from phalanx.ends import End, Facts, decide, facts, pending_ends
from phalanx.errors import NotFound
from phalanx.machine.procs import Seen, recorded_but_gone

if TYPE_CHECKING:
    from phalanx.config import Settings
    from phalanx.domain import Experiment
    from phalanx.machine.ledger import Entry
    from phalanx.store.base import Store

log = logging.getLogger(__name__)


def record_end(store: Store, experiment_id: str, end: End, settings: Settings | None = None) -> bool:
    """THE writer of an end decided here: what a killed local supervisor left running is ended
    first (``settings`` given, a failed local experiment), then unfinished replicas, then the
    experiment. Re-read first: nothing is written over an end its supervisor recorded meanwhile.
    Whether it wrote."""
    try:
        exp = store.get_experiment(experiment_id)
    except NotFound:
        return False
    if exp.status.done:
        return False
    if settings is not None and end.status is ExperimentStatus.FAILED:
        try:
            _end_leftovers(settings, exp)
        except Exception as exc:  # marking it failed matters more
            log.warning("ending what experiment %s left running failed: %s", exp.id, exc)
    now = time.time()
    for r in store.list_replicas(exp.id):
        if not ReplicaState(r.state).done:
            store.update_replica(
                exp.id, r.name, state=end.replica_state, reason=end.replica_reason, finished_at=now
            )
    store.update_experiment(exp.id, status=end.status, reason=end.reason, finished_at=now)
    log.warning("experiment %s: %s; marked %s", exp.id, end.reason, end.status)
    return True


def gone_recorder(store: Store, settings: Settings, exp: Experiment) -> str | None:
    """What ended without recording the experiment's end ("supervisor", "script"), if this machine
    can tell; None while it runs or when it cannot tell (another machine's run or script)."""
    f = facts(store, settings, exp, in_queue=True)
    if f.recorder is not Seen.GONE:
        return None
    return "script" if f.script else "supervisor"


def clean_aborted_starts(store: Store, settings: Settings) -> list[str]:
    """Folders of experiments whose `phalanx run` was killed before it recorded them (it opens the
    store only once the replicas are starting): with the supervisor gone and no experiment in the
    store, its run folder and spool are removed, so nothing of an experiment that never appears is
    left (nor ingested later as rows of no experiment). Run before an ingest pass."""
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

        for attempt in sorted((folder / "attempts").glob("*/state.json")):  # its local replicas
            with contextlib.suppress(Exception):
                _end_handle(settings, f"{folder.name}:{attempt.parent.name}")
        for path in (folder, settings.spool_dir / folder.name):
            shutil.rmtree(path, ignore_errors=True)
        removed.append(folder.name)
        log.warning("removed what a killed `phalanx run` left of experiment %s (never recorded)", folder.name)
    return removed


def _warn_unchecked(exp: Experiment, exc: Exception) -> None:
    log.warning("checking experiment %s failed: %s", exp.id, exc)


def reconcile(store: Store, settings: Settings) -> list[str]:
    """Every unfinished experiment of this machine whose recorder is gone gets its end (failed;
    a queued one abandoned in the queue: stopped); returns their ids. Dead ledger entries are
    reclaimed on the way (the snapshot drops them)."""
    ended: list[str] = []
    for exp, end in list(pending_ends(store, settings, _warn_unchecked)):
        try:
            if record_end(store, exp.id, end, settings):
                ended.append(exp.id)
        except Exception as exc:  # one experiment's trouble must not stop a read command
            log.warning("recording the end of experiment %s failed: %s", exp.id, exc)
    return ended


def settle(store: Store, settings: Settings, exp: Experiment) -> Experiment:
    """One experiment, as ``reconcile`` judges it: the same experiment, or its final state when its
    recorder is gone (SIGKILLed running: failed; while queued: stopped). For a watcher that polls a
    few experiments (a group's controller, ``Runner.status``, ``phalanx logs -f``)."""
    if exp.status.done:
        return exp
    end = decide(facts(store, settings, exp))
    if end is None:
        return exp
    record_end(store, exp.id, end, settings)
    return store.get_experiment(exp.id)


def stop_abandoned(store: Store, entries: Iterable[Entry]) -> None:
    """Waiting ledger entries a supervisor reclaimed (their `phalanx run` is gone, as the ledger's
    own pid and start time check found): their queued rows are stopped."""
    for e in entries:
        if e.holding:
            continue
        with contextlib.suppress(NotFound):
            exp = store.get_experiment(e.experiment_id)
            if exp.status is not ExperimentStatus.QUEUED:
                continue  # only a waiter's row: what ran is judged by its own recorder
            end = decide(Facts(exp.status, recorder=Seen.GONE, recorder_pid=e.pid))
            if end is not None:
                record_end(store, exp.id, end)


def _end_leftovers(settings: Settings, exp: Experiment) -> None:
    """A local experiment whose supervisor is gone: end whatever its replicas left running before
    it is marked failed. Their leaders die with the supervisor (parent-death signal) and take their
    trees along, but a leader killed too leaves its processes to nobody; the engine finds them by
    their mark (backends.local.members) and its cancel returns once none runs."""
    if exp.backend != "local" or not exp.handle:
        return
    _end_handle(settings, exp.handle)


def _end_handle(settings: Settings, handle: str) -> None:
    from phalanx.backends.local.engine import LocalBackend  # why: `phalanx ls` needs no local engine

    LocalBackend(settings).cancel(handle)


def fail_unstarted(store: Store, experiment_id: str, why: str) -> bool:
    """An experiment the server accepted (status created) whose start ended before it ran (its
    supervisor exited first, its code bundle would not unpack): failed, saying why. Whether it wrote."""
    try:
        exp = store.get_experiment(experiment_id)
    except NotFound:
        return False
    end = decide(Facts(exp.status, start_failure=why))
    return end is not None and record_end(store, exp.id, end)
