"""The one owner of an experiment's end when its supervisor cannot decide it.

An experiment's end is recorded by the process that watched it: `phalanx run`'s supervisor, or the
Task of a plain ``python script.py``. When that process is gone (SIGKILLed, taken by the OOM killer,
a segfault, a reboot), when a user stops an experiment whose supervisor is gone, when a `phalanx
run` dies while it waits in the queue, or when ``submit()`` gives up on what it started, somebody
else must write the end. That somebody is this module, for all of them:

* ``decide(Facts) -> End | None`` is the rule, written once: a pure function of what was seen
  (status, whether the supervisor or the script still runs, whether the queue still knows it, who
  asks). ``tests/unit/test_reconcile_decide.py`` holds its table.
* ``record_end(store, experiment_id, end)`` is the one writer: unfinished replicas first, then the
  experiment, and never over an end the supervisor recorded meanwhile.
* ``facts(...)`` gathers what this machine can see, through ``procs.judge`` (the one liveness
  check: pid and start time); ``settle`` / ``reconcile`` / ``stop_abandoned`` put the three together
  for one experiment, for every unfinished one (the CLI's read commands, ``phalanx queue``, a
  group's controller, ``Runner.status``), and for the queue entries a supervisor reclaimed.

Experiments of other machines are left alone (their processes cannot be seen here).
"""

from __future__ import annotations

import contextlib
import enum
import logging
import shutil
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from phalanx.domain import ExperimentFilter, ExperimentStatus, ReplicaState
from phalanx.errors import NotFound
from phalanx.machine.procs import HOST, Seen, judge, read_record, recorded_but_gone, started_at

if TYPE_CHECKING:
    from phalanx.config import Settings
    from phalanx.domain import Experiment, Page, Replica
    from phalanx.machine.ledger import Entry
    from phalanx.store.base import Store

log = logging.getLogger(__name__)

FAULT_FILE = "fault-{pid}.txt"  # where a plain script's faulthandler writes a crash (spool folder)
ABANDONED = "its phalanx run ended while it was queued (killed?)"
GAVE_UP = "submit() gave up waiting for it"
STOPPED_BY = "stopped by phalanx stop"
UNSTARTED = "the server could not start it"
UNFINISHED = (ExperimentStatus.RUNNING, ExperimentStatus.STARTING, ExperimentStatus.BUILDING)


class Asker(enum.Enum):
    """Who asks for the end to be decided."""

    READER = "reader"  # a read command, the queue, a controller, Runner.status: only if it is orphaned
    STOP = "stop"  # phalanx stop / the server's stop / a group's pruning, after the stop request
    SUBMIT = "submit"  # Experiment.submit gave up on what it started


@dataclass(frozen=True)
class Facts:
    """What was seen of one experiment (gathered by ``facts``; built by hand in tests)."""

    status: ExperimentStatus
    script: bool = False  # a plain script's Task.init (no supervisor, no engine)
    recorder: Seen | None = None  # its supervisor (or the script's process); None: no record here
    recorder_pid: int | None = None
    in_queue: bool = False  # this machine's ledger still holds or queues it
    crash: str | None = None  # the first line Python's faulthandler wrote for the script
    asker: Asker = Asker.READER
    reason: str | None = None  # a stop's own reason (a group's pruning decision)
    supervised_stop: bool = False  # the stop was taken to a supervisor that ran (it did not finish)
    start_failure: str | None = None  # (created, submitted to a server) why its start ended early


@dataclass(frozen=True)
class End:
    """A final status and why; the replicas still unfinished get ``replica_state``."""

    status: ExperimentStatus
    reason: str
    replica_state: ReplicaState
    replica_reason: str | None = None


def decide(f: Facts) -> End | None:
    """THE rule for an experiment's end when its supervisor cannot record it (None: leave it).

    | status                      | asker  | seen                              | end                      |
    |-----------------------------|--------|-----------------------------------|--------------------------|
    | succeeded, failed, stopped  | any    | -                                 | none (already ended)     |
    | any unfinished              | submit | -                                 | stopped: submit gave up  |
    | any unfinished              | stop   | -                                 | stopped: reason (+ gone) |
    | building, starting, running | reader | supervisor or script gone         | failed: how it died      |
    | queued                      | reader | not in the queue, supervisor gone | stopped: abandoned       |
    | created (a server's submit) | reader | its start ended before it ran     | failed: what it said     |
    | anything else               | reader | runs, elsewhere, no record        | none                     |
    """
    if f.status.done:
        return None
    if f.asker is Asker.SUBMIT:
        return End(ExperimentStatus.STOPPED, GAVE_UP, ReplicaState.STOPPED)
    if f.asker is Asker.STOP:
        said = f.reason or STOPPED_BY
        if not f.supervised_stop:
            said += " (its script was gone)" if f.script else " (its supervisor was gone)"
        return End(ExperimentStatus.STOPPED, said, ReplicaState.STOPPED)
    if f.status is ExperimentStatus.CREATED and f.start_failure is not None:
        why = f"{UNSTARTED}: {f.start_failure}"
        return End(ExperimentStatus.FAILED, why, ReplicaState.STOPPED, why)
    if f.recorder is not Seen.GONE:
        return None
    if f.status is ExperimentStatus.QUEUED:
        if f.in_queue:
            return None
        return End(ExperimentStatus.STOPPED, ABANDONED, ReplicaState.STOPPED)
    if f.status not in UNFINISHED:
        return None
    if f.script:
        if f.crash:
            why = f"the script (pid {f.recorder_pid}) crashed: {f.crash}"
        else:
            why = (
                f"the script (pid {f.recorder_pid}) ended without recording its end: killed by a signal "
                "it cannot catch (SIGKILL, the OOM killer) or crashed"
            )
    else:
        why = f"phalanx run (pid {f.recorder_pid}) was killed before it recorded the outcome"
    return End(ExperimentStatus.FAILED, why, ReplicaState.FAILED, why)


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


class ReplicaLister(Protocol):
    """What ``facts`` reads of a store: the full store, or the lean CLI's sqlite3 reader."""

    def list_replicas(self, experiment_id: str) -> list[Replica]: ...


class ExperimentReader(ReplicaLister, Protocol):
    """What ``pending_ends`` reads: experiments by status, and their replicas."""

    def list_experiments(self, query: ExperimentFilter | None = None) -> Page[Experiment]: ...


def facts(
    store: ReplicaLister,
    settings: Settings,
    exp: Experiment,
    in_queue: bool | None = None,
    here: str | None = None,
) -> Facts:
    """What this machine can see of ``exp``'s recorder (supervisor or script) and queue place.
    ``in_queue``: known already (a ledger snapshot); None: read the ledger if it is queued."""
    if exp.backend == "script":
        host = here or HOST
        pids = [r.pid for r in store.list_replicas(exp.id) if r.pid and r.host == host]
        if not pids:
            return Facts(exp.status, script=True)
        runs = any(_runs_since(p, exp.created_at) for p in pids)
        crash = None if runs else _fault_line(settings.spool_dir / exp.id, pids[0])
        return Facts(exp.status, True, Seen.RUNS if runs else Seen.GONE, pids[0], crash=crash)
    pid_file = settings.runs_dir / exp.id / "supervisor.pid"
    record = read_record(pid_file)
    if record is None:
        seen, pid = None, None
    else:
        gone = recorded_but_gone(pid_file)
        pid = record[0]
        seen = Seen.GONE if gone is not None else judge(pid, record[1], record[2])
    if exp.status is ExperimentStatus.QUEUED and in_queue is None:
        in_queue = _queued_here(settings, exp.id)
    return Facts(exp.status, recorder=seen, recorder_pid=pid, in_queue=bool(in_queue))


def _queued_here(settings: Settings, experiment_id: str) -> bool:
    from phalanx.queue import ledger_for  # why: `phalanx ls`'s lean check needs no queue or ledger

    holding, waiting, _ = ledger_for(settings).snapshot()
    return any(e.experiment_id == experiment_id for e in holding + waiting)


def _runs_since(pid: int, created: float | None) -> bool:
    """Whether ``pid`` runs and is the process that created the experiment (not a reused pid): a
    script's replica rows carry its pid but no start time, so its start is compared with the
    experiment's creation instead."""
    start = started_at(pid)
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


def pending_ends(store: ExperimentReader, settings: Settings) -> Iterator[tuple[Experiment, End]]:
    """Each unfinished experiment of this machine whose recorder is gone, with the end ``decide``
    gives it (queued ones checked against one ledger snapshot). Reads only: ``reconcile`` records
    them; the lean CLI asks whether there is any (``readpass``)."""
    here = HOST
    queued = store.list_experiments(ExperimentFilter(status=ExperimentStatus.QUEUED, limit=1000)).items
    known: set[str] = set()
    if queued:
        from phalanx.queue import ledger_for  # why: `phalanx ls`'s lean check needs no queue or ledger

        holding, waiting, _ = ledger_for(settings).snapshot()
        known = {e.experiment_id for e in holding + waiting}
    candidates = list(queued)
    for status in UNFINISHED:
        candidates += store.list_experiments(ExperimentFilter(status=status, limit=500)).items
    for exp in candidates:
        try:
            end = decide(facts(store, settings, exp, in_queue=exp.id in known, here=here))
        except Exception as exc:  # one experiment's trouble must not stop a read command
            log.warning("checking experiment %s failed: %s", exp.id, exc)
            continue
        if end is not None:
            yield exp, end


def reconcile(store: Store, settings: Settings) -> list[str]:
    """Every unfinished experiment of this machine whose recorder is gone gets its end (failed;
    a queued one abandoned in the queue: stopped); returns their ids. Dead ledger entries are
    reclaimed on the way (the snapshot drops them)."""
    ended: list[str] = []
    for exp, end in list(pending_ends(store, settings)):
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
