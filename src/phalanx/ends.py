"""An experiment's end when the process that watched it cannot record it: the rule, what this
machine can see, and which experiments wait for one. Reads only: ``phalanx.reconcile`` records
what is decided here (phalanx/reconcile.py says who asks, and why this is written once).

* ``decide(Facts) -> End | None`` is the rule: a pure function of what was seen (status, whether
  the supervisor or the script still runs, whether the queue still knows it, who asks).
  ``tests/unit/test_reconcile_decide.py`` holds its table.
* ``facts(...)`` gathers what this machine can see, through ``procs.judge`` (the one liveness
  check: pid and start time).
* ``pending_ends`` lists the unfinished experiments of this machine whose recorder is gone, with
  their end: `phalanx ls`'s lean check asks it through the standard-library reader, so this module
  imports neither logging nor shutil (issue 42: `ls` within python-start + 0.05 CPU-s).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from phalanx.domain import ExperimentFilter, ExperimentStatus, ReplicaState
from phalanx.machine.procs import HOST, Seen, judge, read_record, recorded_but_gone, started_at

if TYPE_CHECKING:
    from phalanx.config import Settings
    from phalanx.domain import Experiment, Page, Replica

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
        why = f"its supervisor (pid {f.recorder_pid}) was killed before it recorded the outcome"
    return End(ExperimentStatus.FAILED, why, ReplicaState.FAILED, why)


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


def pending_ends(
    store: ExperimentReader,
    settings: Settings,
    failed: Callable[[Experiment, Exception], None] | None = None,
) -> Iterator[tuple[Experiment, End]]:
    """Each unfinished experiment of this machine whose recorder is gone, with the end ``decide``
    gives it (queued ones checked against one ledger snapshot). Reads only: ``reconcile`` records
    them; the lean CLI asks whether there is any (``readpass``). ``failed``: told of an experiment
    whose facts could not be read (it is left out), else the error is raised."""
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
            if failed is None:
                raise
            failed(exp, exc)
            continue
        if end is not None:
            yield exp, end
