"""The machine's resource ledger and queue: which experiment holds which cores, GPUs and memory,
and who waits for them, in which order.

Why a locked file and not a table: every `phalanx run` on this machine (attached, ``--detach``,
estimator ``submit()``, a hyperparameter search's trials) must see the same ledger whichever store
it writes to (SQLite or PostgreSQL, maybe a remote one shared by several machines), with no daemon
to install. So the ledger is one JSON document (``<PHALANX_HOME>/ledger.json``, or the file
``PHALANX_LEDGER`` names, to share it between several homes), read and rewritten only under an
exclusive ``fcntl.flock`` on ``ledger.json.lock``. The kernel drops a flock when its holder dies,
so a crash never leaves the ledger locked; the document itself is replaced atomically.

Every entry carries its supervisor's pid and that process's start time (from /proc): an entry
whose process is gone, or whose pid now belongs to another process, is reclaimed by the next
process that takes the lock, so a SIGKILLed `phalanx run` frees what it held at the next look.

Admission (``Ledger.admit``) is all or nothing: the experiment's whole need (every replica) fits in
what is free, or it waits. The queue order is priority (higher first), then arrival. Anti-starvation:

* head of the queue reserves: a waiting experiment that does not fit yet keeps what it needs of what
  is free (clamped at zero) for itself, so nobody behind it may take those cores, GPUs or memory;
  a small experiment may only start beside it using resources the blocked one does not need;
* aging: an experiment's priority grows by one for every ``AGING_SECONDS`` it has waited, so a
  steady stream of higher-priority experiments cannot keep a lower one waiting forever.

Quotas and fair share (``phalanx.share``): every entry names its project; ``admit`` is given each
project's limit, and a run that would take its project over its quota waits without reserving
anything. The order mixes priority with each project's recent usage, which the document keeps
(``usage``: decayed core-seconds per project, folded in when a run releases its cores).

Standard library only (it is imported by the supervisor before anything else starts).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import math
import os
import socket
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from phalanx import share
from phalanx.domain import plural
from phalanx.machine import doorbell
from phalanx.machine.procs import Seen, judge, start_time
from phalanx.share import AGING_SECONDS, DEFAULT_PROJECT, Limit

__all__ = [
    "AGING_SECONDS",
    "Capacity",
    "Entry",
    "Grant",
    "Ledger",
    "Need",
    "NeverFits",
    "NoRoom",
    "TooManyWaiting",
]

FORMAT = 1
NO_WAIT_ADVICE = "run it without --no-wait to queue it until it fits"
SERVICE_PREFIXES = ("notebook-", "model-")  # the entries of services (phalanx.services.seats)


@dataclass(frozen=True)
class Need:
    """What one experiment asks of the machine, all replicas together."""

    cpus: int = 0
    gpus: int = 0
    memory_mib: float = 0.0
    # what the counts were taken from, for messages ("cores from the cpu limits"); not stored
    counted: str = field(default="", compare=False)

    @property
    def empty(self) -> bool:
        return not (self.cpus or self.gpus or self.memory_mib)

    def to_json(self) -> dict[str, Any]:
        return {"cpus": self.cpus, "gpus": self.gpus, "memory_mib": self.memory_mib}

    @staticmethod
    def from_json(doc: Mapping[str, Any]) -> Need:
        return Need(int(doc.get("cpus", 0)), int(doc.get("gpus", 0)), float(doc.get("memory_mib", 0.0)))

    def describe(self) -> str:
        parts = [plural(self.cpus, "core")] if self.cpus else []
        if self.gpus:
            parts.append(plural(self.gpus, "GPU"))
        if self.memory_mib:
            parts.append(f"{self.memory_mib:g} MiB")
        return ", ".join(parts) or "nothing"


@dataclass(frozen=True)
class Grant:
    """What an admitted experiment was given: these exact cores and GPUs, this much memory."""

    cpus: tuple[int, ...] = ()
    gpus: tuple[str, ...] = ()
    memory_mib: float = 0.0


@dataclass(frozen=True)
class Entry:
    """One experiment in the ledger: holding (admitted) or waiting."""

    experiment_id: str
    pid: int
    start: str  # the process's start time in clock ticks since boot (/proc/<pid>/stat field 22)
    need: Need
    name: str = ""
    priority: int = 0
    seq: int = 0  # arrival order
    since: float = 0.0  # when it started waiting, or was admitted
    holding: bool = False
    cpus: tuple[int, ...] = ()
    gpus: tuple[str, ...] = ()
    host: str = ""  # the machine whose pid this is (a ledger file on a shared disk names several)
    project: str = DEFAULT_PROJECT

    def to_json(self) -> dict[str, Any]:
        return {
            "experiment_id": self.experiment_id,
            "host": self.host,
            "pid": self.pid,
            "start": self.start,
            "need": self.need.to_json(),
            "name": self.name,
            "priority": self.priority,
            "seq": self.seq,
            "since": self.since,
            "holding": self.holding,
            "cpus": list(self.cpus),
            "gpus": list(self.gpus),
            "project": self.project,
        }

    @staticmethod
    def from_json(doc: Mapping[str, Any]) -> Entry:
        return Entry(
            experiment_id=str(doc["experiment_id"]),
            pid=int(doc["pid"]),
            start=str(doc.get("start", "")),
            need=Need.from_json(doc.get("need", {})),
            name=str(doc.get("name", "")),
            priority=int(doc.get("priority", 0)),
            seq=int(doc.get("seq", 0)),
            since=float(doc.get("since", 0.0)),
            holding=bool(doc.get("holding", False)),
            cpus=tuple(int(c) for c in doc.get("cpus", ())),
            gpus=tuple(str(g) for g in doc.get("gpus", ())),
            host=str(doc.get("host", "")),
            project=str(doc.get("project") or DEFAULT_PROJECT),
        )

    def effective_priority(self, now: float) -> float:
        return self.priority + share.aging(self.since, now)

    def cores_held(self) -> int:
        return len(self.cpus) or self.need.cpus


@dataclass(frozen=True)
class Capacity:
    """What the machine offers the ledger (as this process sees it)."""

    cpus: tuple[int, ...]
    gpus: tuple[str, ...]
    memory_mib: float


@dataclass
class State:
    """The ledger document."""

    entries: dict[str, Entry] = field(default_factory=dict)
    seq: int = 0
    # per project: (decayed core-seconds of its ended runs, when that was recorded)
    usage: dict[str, tuple[float, float]] = field(default_factory=dict)
    cores: int = 0  # the machine's cores as the last admission saw them (to weigh usage)

    def holding(self) -> list[Entry]:
        return sorted((e for e in self.entries.values() if e.holding and here(e)), key=lambda e: e.since)

    def recent_usage(self, project: str, now: float) -> float:
        """The project's decayed core-seconds at ``now``: its ended runs', and its running ones' so far."""
        done, at = self.usage.get(project, (0.0, now))
        running = sum(
            share.accrued(e.cores_held(), e.since, now)
            for e in self.entries.values()
            if e.holding and here(e) and e.project == project
        )
        return share.decayed(done, at, now) + running

    def penalty(self, project: str, now: float) -> float:
        return share.penalty(self.recent_usage(project, now), self.cores or os.cpu_count() or 1)

    def waiting(self, now: float | None = None) -> list[Entry]:
        """This machine's waiting entries in queue order: the fair-share score (priority + aging -
        the project's usage penalty, higher first), then arrival."""
        now = time.time() if now is None else now
        waiting = [e for e in self.entries.values() if not e.holding and here(e)]
        penalties = {p: self.penalty(p, now) for p in {e.project for e in waiting}}
        return sorted(waiting, key=lambda e: (-(e.effective_priority(now) - penalties[e.project]), e.seq))

    def forget(self, experiment_id: str, now: float) -> Entry | None:
        """Remove the entry; a holding one's core-seconds join its project's recent usage."""
        e = self.entries.pop(experiment_id, None)
        if e is not None and e.holding and here(e):
            done, at = self.usage.get(e.project, (0.0, now))
            self.usage[e.project] = (
                share.decayed(done, at, now) + share.accrued(e.cores_held(), e.since, now),
                now,
            )
        for project, (value, at) in list(self.usage.items()):  # weighs nothing any more: gone
            if share.decayed(value, at, now) < 1e-6:
                del self.usage[project]
        return e

    def judge(self, capacity: Capacity, limits: Mapping[str, Limit], now: float) -> dict[str, share.Verdict]:
        """Every waiting entry's verdict (may it start now, or why it waits)."""
        free_cpus, free_gpus, free_mem = _free(self, capacity)
        held: dict[str, list[float]] = {}
        for e in self.holding():
            h = held.setdefault(e.project, [0.0, 0.0, 0.0])
            h[0] += e.cores_held()
            h[1] += len(e.gpus) or e.need.gpus
            h[2] += e.need.memory_mib
        waiting = self.waiting(now)
        penalties = {p: self.penalty(p, now) for p in {e.project for e in waiting}}
        return share.judge(
            waiting,
            held,
            (len(free_cpus), len(free_gpus), free_mem),
            limits,
            {e.experiment_id: e.effective_priority(now) for e in waiting},
            {e.experiment_id: penalties[e.project] for e in waiting},
        )


class NoRoom(Exception):
    """Raised by ``admit(..., wait=False)``: the experiment does not fit now; says what is busy."""


class NeverFits(Exception):
    """The experiment needs more than this machine has at all (or than its project's quota)."""


class TooManyWaiting(Exception):
    """The experiment would wait, and its project already has its quota's most experiments waiting."""


# ---- processes --------------------------------------------------------------------------------


def process_start(pid: int) -> str | None:
    """Start time of ``pid`` (None: gone, or a zombie): with the pid it names one process for good."""
    ticks = start_time(pid)
    return None if ticks is None else str(ticks)


HOST = socket.gethostname()


def here(entry: Entry) -> bool:
    """Whether the entry belongs to this machine (only those hold its cores and can be judged)."""
    return entry.host in ("", HOST)


def alive(entry: Entry) -> bool:
    """Whether the entry's supervisor still runs (procs.judge: pid and start time; another
    machine's entry is trusted, since it cannot be seen from here)."""
    start = int(entry.start) if entry.start.isdigit() else -1  # "": it was gone when recorded
    return judge(entry.pid, start, entry.host) is not Seen.GONE


# ---- the file ---------------------------------------------------------------------------------


def ledger_path(home: str | os.PathLike[str]) -> Path:
    """``PHALANX_LEDGER`` if set (one ledger for several PHALANX_HOMEs), else <home>/ledger.json."""
    override = os.environ.get("PHALANX_LEDGER")
    return Path(override) if override else Path(home) / "ledger.json"


class Ledger:
    """The ledger file of one machine. Every method takes the lock for its whole read-modify-write."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.lock_path = self.path.with_name(self.path.name + ".lock")

    @contextlib.contextmanager
    def locked(self) -> Iterator[State]:
        """The state under the exclusive lock; changes made to it are written back on exit."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # read-only is enough for flock, so users sharing one ledger (PHALANX_LEDGER) need not own it
        fd = os.open(self.lock_path, os.O_RDONLY | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            state = self._read()
            before = self._dump(state)
            yield state
            after = self._dump(state)
            if after != before:
                tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
                tmp.write_text(after)
                tmp.replace(self.path)
        finally:
            os.close(fd)  # releases the flock

    def _read(self) -> State:
        try:
            doc = json.loads(self.path.read_text())
        except FileNotFoundError:
            return State()
        except ValueError:  # not ours, or damaged: start afresh rather than block every run
            return State()
        entries = {}
        for raw in doc.get("entries", []):
            with contextlib.suppress(KeyError, ValueError, TypeError):
                e = Entry.from_json(raw)
                entries[e.experiment_id] = e
        usage = {}
        for project, raw in (doc.get("usage") or {}).items():
            with contextlib.suppress(KeyError, ValueError, TypeError):
                usage[str(project)] = (float(raw["core_seconds"]), float(raw["at"]))
        return State(entries=entries, seq=int(doc.get("seq", 0)), usage=usage, cores=int(doc.get("cores", 0)))

    @staticmethod
    def _dump(state: State) -> str:
        entries = [e.to_json() for e in sorted(state.entries.values(), key=lambda e: e.seq)]
        usage = {p: {"core_seconds": v, "at": at} for p, (v, at) in sorted(state.usage.items())}
        doc = {"format": FORMAT, "seq": state.seq, "cores": state.cores, "usage": usage, "entries": entries}
        return json.dumps(doc, indent=1)

    def version(self) -> tuple[int, int] | None:
        """Changes whenever the ledger is rewritten (a cheap look for waiters, no lock taken)."""
        try:
            st = self.path.stat()
        except OSError:
            return None
        return (st.st_ino, st.st_mtime_ns)

    # -- reading ----------------------------------------------------------------------------------
    def snapshot(self) -> tuple[list[Entry], list[Entry], list[Entry]]:
        """(holding, waiting in queue order, reclaimed): dead entries are reclaimed on the way."""
        with self.locked() as state:
            gone = reclaim(state)
            return state.holding(), state.waiting(), gone

    # -- changing ---------------------------------------------------------------------------------
    def admit(
        self,
        experiment_id: str,
        need: Need,
        capacity: Capacity,
        *,
        pid: int | None = None,
        name: str = "",
        priority: int = 0,
        wait: bool = True,
        project: str = DEFAULT_PROJECT,
        limits: Mapping[str, Limit] | None = None,
        asker: str = "the experiment",
        advice: str = NO_WAIT_ADVICE,
    ) -> tuple[Grant | None, list[Entry]]:
        """Admit the experiment if its whole need fits now, within its project's quota (``limits``:
        per project), and nobody ahead in the queue is owed it.

        Returns (grant, reclaimed): the grant when admitted, else None and the experiment is (still)
        in the queue. ``reclaimed``: entries of dead processes removed on the way (their store rows
        may need marking). With ``wait=False`` NoRoom is raised instead of queueing.
        Raises NeverFits when the need exceeds the machine itself or the project's quota, and
        TooManyWaiting when it would wait and its project already has max_waiting runs waiting.
        """
        pid = os.getpid() if pid is None else pid
        start = process_start(pid) or ""
        limits = limits or {}
        project = project or DEFAULT_PROJECT
        never = never_fits(need, capacity) or share.never_within(project, need, limits.get(project))
        if never:
            raise NeverFits(never)
        with self.locked() as state:
            gone = reclaim(state)
            state.cores = len(capacity.cpus)
            now = time.time()
            mine = state.entries.get(experiment_id)
            if mine is not None and mine.holding:
                return Grant(mine.cpus, mine.gpus, mine.need.memory_mib), gone
            fresh = mine is None
            if mine is None:
                state.seq += 1
                mine = Entry(experiment_id, pid, start, need, name, priority, state.seq, now, host=HOST)
            mine = dataclasses.replace(mine, project=project)
            state.entries[experiment_id] = mine  # sorted in with the others for the pass
            verdict = state.judge(capacity, limits, now)[experiment_id]
            if verdict.starts:
                free_cpus, free_gpus, _ = _free(state, capacity)
                grant = Grant(tuple(free_cpus[: need.cpus]), tuple(free_gpus[: need.gpus]), need.memory_mib)
                state.entries[experiment_id] = dataclasses.replace(
                    mine, since=now, holding=True, cpus=grant.cpus, gpus=grant.gpus, host=HOST
                )
                return grant, gone
            if not wait:
                state.entries.pop(experiment_id, None)
                raise NoRoom(busy_message(state, need, capacity, asker, advice) + f"\n  why: {verdict.why()}")
            most = (limits.get(project) or Limit()).max_waiting
            if fresh and most is not None:
                others = [
                    e for e in state.waiting(now) if e.project == project and e.experiment_id != experiment_id
                ]
                if len(others) >= most:
                    state.entries.pop(experiment_id, None)
                    raise TooManyWaiting(
                        f"{share.TOO_MANY_WAITING}: project {project} already has {len(others)} experiment"
                        f"{'s' * (len(others) != 1)} waiting, its quota's most ({most}) on this machine;"
                        f" this one would wait too ({verdict.why()}). Submit it when some have started,"
                        f" or raise the limit with `phalanx quota set {project} --max-waiting N`"
                    )
            return None, gone

    def release(self, experiment_id: str) -> bool:
        """Forget the experiment (it ended, was stopped, or stopped waiting); True if it was there.
        The waiters are woken at once (``machine.doorbell``): what it held may let one start."""
        with self.locked() as state:
            was_there = state.forget(experiment_id, time.time()) is not None
        if was_there:
            doorbell.ring(doorbell.bells_folder(self.path))
        return was_there

    def reprioritise(self, experiment_id: str, priority: int) -> Entry | None:
        """Give a waiting experiment another priority (its place in the queue follows at the next
        pass); the waiters are woken, since one may now be first. None: it is not waiting here."""
        with self.locked() as state:
            reclaim(state)
            entry = state.entries.get(experiment_id)
            if entry is None or entry.holding:
                return None
            state.entries[experiment_id] = dataclasses.replace(entry, priority=priority)
        doorbell.ring(doorbell.bells_folder(self.path))
        return state.entries[experiment_id]

    def position(self, experiment_id: str) -> int | None:
        """1-based place in the queue (None: not waiting)."""
        with self.locked() as state:
            reclaim(state)
            for i, e in enumerate(state.waiting(), 1):
                if e.experiment_id == experiment_id:
                    return i
        return None


def reclaim(state: State) -> list[Entry]:
    """Remove (and return) the entries whose supervisor is gone."""
    gone = [e for e in state.entries.values() if not alive(e)]
    now = time.time()
    for e in gone:
        state.forget(e.experiment_id, now)
    return gone


def _free(state: State, capacity: Capacity) -> tuple[list[int], list[str], float]:
    holding = state.holding()
    held_cpus = {c for e in holding for c in e.cpus}
    held_gpus = {g for e in holding for g in e.gpus}
    held_mem = sum(e.need.memory_mib for e in holding)
    return (
        [c for c in capacity.cpus if c not in held_cpus],
        [g for g in capacity.gpus if g not in held_gpus],
        capacity.memory_mib - held_mem,
    )


def never_fits(need: Need, capacity: Capacity) -> str | None:
    """Why ``need`` exceeds this machine itself (it could never start here), or None."""
    short = []
    if need.cpus > len(capacity.cpus):
        short.append(f"{plural(need.cpus, 'core')} (it has {len(capacity.cpus)})")
    if need.gpus > len(capacity.gpus):
        short.append(f"{plural(need.gpus, 'GPU')} (it has {len(capacity.gpus)})")
    if need.memory_mib > capacity.memory_mib + 1e-9:
        short.append(f"{need.memory_mib:g} MiB of memory (it has {capacity.memory_mib:g})")
    if not short:
        return None
    counted = f" (counted: {need.counted})" if need.counted else ""
    return "the experiment needs " + " and ".join(short) + f" on this machine{counted}"


def busy_message(
    state: State, need: Need, capacity: Capacity, asker: str = "the experiment", advice: str = NO_WAIT_ADVICE
) -> str:
    """What --no-wait says (and a service that does not queue): what ``asker`` needs, what is free,
    who holds or is owed the rest, and ``advice``."""
    free_cpus, free_gpus, free_mem = _free(state, capacity)
    lines = [
        f"{asker} needs {need.describe()}"
        + (f" ({need.counted})" if need.counted else "")
        + f"; free now: {len(free_cpus)} of {plural(len(capacity.cpus), 'core')}"
        + (f", {len(free_gpus)} of {plural(len(capacity.gpus), 'GPU')}" if capacity.gpus or need.gpus else "")
        + (f", {max(0.0, free_mem):g} MiB" if need.memory_mib else "")
    ]
    for e in state.holding():
        lines.append(f"  held by {_entry(e)}{_named(e)} (pid {e.pid}): {_holds(e)}")
    for e in state.waiting():
        lines.append(
            f"  waiting ahead: experiment {e.experiment_id}{_named(e)} (priority {e.priority}, pid {e.pid}) "
            f"needs {e.need.describe()}"
        )
    lines.append(advice)
    return "\n".join(lines)


def _entry(e: Entry) -> str:
    """An entry as a person knows it: an experiment, or a service (a notebook, a served model)."""
    return f"{'service' if e.experiment_id.startswith(SERVICE_PREFIXES) else 'experiment'} {e.experiment_id}"


def _named(e: Entry) -> str:
    return f" ({e.name})" if e.name else ""


def _holds(e: Entry) -> str:
    parts = []
    if e.cpus:
        parts.append("cores " + ",".join(str(c) for c in e.cpus))
    if e.gpus:
        parts.append("GPUs " + ",".join(e.gpus))
    if e.need.memory_mib:
        parts.append(f"{e.need.memory_mib:g} MiB")
    return "; ".join(parts) or "nothing"


def cores_counted(res: Any) -> tuple[int, str]:
    """The one size rule of this machine, for one replica's cores: the local engine pins a replica
    to ``ceil(cpu limit)`` cores, so that is what it counts, or ``ceil(cpu request)`` where no limit
    is given (the cores it may use). Returns (cores, "limits" | "requests" | ""): every local check
    (`phalanx check`, the dry run, the early refusal, the queue) counts through here and names what
    it counted. Cluster engines schedule on requests and do not use it."""
    if res.cpu.limits is not None:
        c, basis = res.cpu.limits, "limits"
    elif res.cpu.requests is not None:
        c, basis = res.cpu.requests, "requests"
    else:
        return 0, ""
    return (max(1, math.ceil(c)), basis) if c else (0, "")


def memory_counted(res: Any) -> tuple[float, str]:
    """A replica's memory on this machine: its request (what it is owed; the limit is only a cap
    enforced on it), or its limit where no request is given."""
    if res.memory.requests is not None:
        return float(res.memory.requests), "requests"
    if res.memory.limits is not None:
        return float(res.memory.limits), "limits"
    return 0.0, ""


def bases(found: Sequence[str]) -> str:
    """What a sum was counted from: "limits", "requests" or "limits and requests"."""
    seen = sorted({b for b in found if b})
    return " and ".join(seen) or "requests"


def need_of(replicas: Sequence[tuple[Any, int]]) -> Need:
    """The need of a topology: ``replicas`` is (Resources, processes) per replica. Cores: see
    ``cores_counted`` (limits, as the local engine pins them); GPUs: the request (or limit);
    memory: see ``memory_counted``."""
    cpus = gpus = 0
    mem = 0.0
    cpu_bases: list[str] = []
    mem_bases: list[str] = []
    for res, _processes in replicas:
        c, basis = cores_counted(res)
        cpus += c
        cpu_bases.append(basis)
        g = res.gpu.requests if res.gpu.requests is not None else res.gpu.limits
        if g:
            gpus += math.ceil(g)
        m, basis = memory_counted(res)
        mem += m
        mem_bases.append(basis)
    return Need(cpus, gpus, mem, counted=_counted_from(cpus, bases(cpu_bases), mem, bases(mem_bases)))


def _counted_from(cpus: int, cpu_basis: str, mem: float, mem_basis: str) -> str:
    parts = []
    if cpus:
        parts.append(f"cores from the cpu {cpu_basis}")
    if mem:
        parts.append(f"memory from the memory {mem_basis}")
    return ", ".join(parts)
