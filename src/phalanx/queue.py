"""This machine's queue, as the supervisor, `phalanx queue`, `phalanx stop` and Python callers use it.

The ledger itself (``phalanx.machine.ledger``) knows processes and resources only; this module ties it to
plans and to the store:

* ``Admission``: what the supervisor of a local experiment does before starting anything: ask the
  ledger; if the whole topology does not fit, record the experiment as ``queued`` and wait (the
  stop file, Ctrl-C and SIGTERM are honoured while waiting) until it does.
* ``overview(settings)``: what runs and what waits, in queue order (`phalanx queue -o json`).

A queued experiment whose `phalanx run` was killed while it waited is ended by
``phalanx.reconcile`` (the one owner of an experiment's end), not here: this module writes no status.

Every launch path goes through the supervisor (`phalanx run`, `--detach`, estimator ``submit()``,
a search's trials), so they all queue the same way.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from phalanx.domain import Experiment, ExperimentFilter, ExperimentStatus, Page
from phalanx.errors import UsageError
from phalanx.machine import doorbell, limits
from phalanx.machine import ledger as ledger_mod
from phalanx.machine.ledger import Capacity, Entry, Grant, Ledger, Need, NeverFits, NoRoom, TooManyWaiting
from phalanx.priority import MAX_PRIORITY, check_priority
from phalanx.share import DEFAULT_PROJECT, LOCAL, Limit, never_within
from phalanx.store import quotas

if TYPE_CHECKING:
    from phalanx.config import Settings
    from phalanx.plan import Plan
    from phalanx.store.base import LocalStore

# How often a waiter looks at the ledger file's identity (a stat, no lock) when its doorbell does
# not ring first (machine.doorbell: a holder leaving rings it at once); it takes the lock and tries
# again as soon as the file changed (someone ended or joined), and at least every RETRY_SECONDS (to
# reclaim the entries of killed processes).
LOOK_SECONDS = 0.05
RETRY_SECONDS = 0.5
# how often a waiter re-reads the quotas from the store (a quota changed while runs wait applies then)
QUOTA_REFRESH_SECONDS = 2.0

__all__ = [
    "MAX_PRIORITY",
    "Admission",
    "Capacity",
    "Entry",
    "Grant",
    "Ledger",
    "Need",
    "NeverFits",
    "NoRoom",
    "TooManyWaiting",
    "capacity",
    "check_priority",
    "ledger_for",
    "local_limits",
    "need_of_plan",
    "overview",
    "waiting_count",
    "waiting_on_clusters",
    "with_targets",
]


def ledger_for(settings: Settings) -> Ledger:
    return Ledger(ledger_mod.ledger_path(settings.home))


def need_of_plan(plan: Plan) -> Need:
    return ledger_mod.need_of([(r.resources, r.processes) for r in plan.replicas])


def capacity(need_gpus: bool = True) -> Capacity:
    """The cores this process may run on, the machine's memory, and its GPUs (nvidia-smi is asked
    only when ``need_gpus``: a CPU experiment does not pay for it)."""
    cpus = tuple(sorted(os.sched_getaffinity(0)))
    gpus = limits.detect_gpus() if need_gpus else ()
    return Capacity(cpus=cpus, gpus=gpus, memory_mib=limits._mem_total_mib())


@dataclass
class Admission:
    """One experiment's way through the queue (used by the Supervisor, once, before it submits).

    ``wait``: queue when it does not fit (False: raise UsageError at once, `--no-wait`).
    ``stop``: returns True when a stop was asked for (checked while waiting).
    ``on_queued``: called once, when the experiment has to wait (the supervisor records it queued).
    ``project``: whose quota and fair share it counts against; ``limits``: reads every project's
    limit on this machine (from the store), called again every QUOTA_REFRESH_SECONDS while waiting.
    """

    experiment_id: str
    need: Need
    ledger: Ledger
    name: str = ""
    priority: int = 0
    wait: bool = True
    reclaimed: list[Entry] | None = None
    project: str = DEFAULT_PROJECT
    limits: Callable[[], Mapping[str, Limit]] | None = None
    _limits: Mapping[str, Limit] = field(default_factory=dict)
    _limits_at: float | None = None

    def admit(
        self,
        stop: Callable[[], bool],
        on_queued: Callable[[str], None],
        on_retry: Callable[[], None] | None = None,
    ) -> Grant | None:
        """The grant once the experiment fits; None if a stop came while it waited (it is then out
        of the queue). Raises UsageError for a need this machine can never meet, or with ``wait``
        false for one that does not fit now."""
        cap = capacity(need_gpus=self.need.gpus > 0)
        self.reclaimed = []
        try:
            grant, _ = self._try(cap)
        except NeverFits as exc:
            raise UsageError(refusal_words(str(exc))) from None
        except TooManyWaiting as exc:
            raise UsageError(str(exc)) from None
        except NoRoom as exc:
            raise UsageError(f"--no-wait: the experiment does not fit now.\n{exc}") from None
        if grant is not None:
            return grant
        try:
            holding, waiting, _ = self.ledger.snapshot()
            position = next(
                (i for i, e in enumerate(waiting, 1) if e.experiment_id == self.experiment_id), "?"
            )
            held = ", ".join(e.experiment_id + (f" ({e.name})" if e.name else "") for e in holding)
            on_queued(
                f"queued (position {position} of {len(waiting)}): waiting for {self.need.describe()}"
                + (f" (project {self.project})" if self.project != DEFAULT_PROJECT else "")
                + (f"; running now: {held}" if held else "")
                + "; `phalanx queue` shows the queue"
            )
            seen = self.ledger.version()
            last = time.monotonic()
            with doorbell.Bell(doorbell.bells_folder(self.ledger.path), self.experiment_id) as bell:
                while True:
                    if stop():
                        self.ledger.release(self.experiment_id)
                        return None
                    bell.wait(LOOK_SECONDS)  # rung the moment a holder leaves the ledger
                    now_version = self.ledger.version()
                    if now_version == seen and time.monotonic() - last < RETRY_SECONDS:
                        continue
                    grant, _ = self._try(cap)
                    seen = self.ledger.version()
                    last = time.monotonic()
                    if grant is not None:
                        return grant
                    if on_retry is not None:
                        on_retry()
        except BaseException:
            self.ledger.release(self.experiment_id)
            raise

    def why(self) -> str:
        """Why it still waits, as `phalanx queue` says it (its project's quota, what it needs and
        what is free, the runs ahead of it)."""
        cap = capacity(need_gpus=self.need.gpus > 0)
        with self.ledger.locked() as state:
            verdict = state.judge(cap, self._current_limits(), time.time()).get(self.experiment_id)
        return verdict.why() if verdict is not None else f"waiting for {self.need.describe()}"

    def _try(self, cap: Capacity) -> tuple[Grant | None, list[Entry]]:
        grant, gone = self.ledger.admit(
            self.experiment_id,
            self.need,
            cap,
            name=self.name,
            priority=self.priority,
            wait=self.wait,
            project=self.project,
            limits=self._current_limits(),
        )
        assert self.reclaimed is not None
        self.reclaimed.extend(gone)
        return grant, gone

    def _current_limits(self) -> Mapping[str, Limit]:
        """The quotas, re-read at most every QUOTA_REFRESH_SECONDS; the last ones read if the store
        fails later (the first read's failure is the experiment's)."""
        if self.limits is None:
            return {}
        now = time.monotonic()
        if self._limits_at is None or now - self._limits_at >= QUOTA_REFRESH_SECONDS:
            if self._limits_at is None:
                self._limits = self.limits()
            else:
                with contextlib.suppress(Exception):
                    self._limits = self.limits()
            self._limits_at = now
        return self._limits

    def release(self) -> None:
        self.ledger.release(self.experiment_id)


def refusal_words(never: str, oversubscribe: bool = True) -> str:
    """What the supervisor (and the server, at submit) says of a need that can never start: the
    ledger's reason, and what to do about it (``oversubscribe``: the user may pass --oversubscribe)."""
    if "quota" in never or not oversubscribe:
        return never if "quota" in never else f"{never}; lower what was counted"
    return f"{never}; lower what was counted, or pass --oversubscribe"


def never_starts(
    need: Need, project: str, limit: Limit | None, target: str, here: Capacity | None
) -> str | None:
    """Why ``need`` can never start: over the project's whole quota on ``target``, or (``here``: this
    machine's capacity, for the local target) over what the machine has at all. None: it can."""
    return (
        never_within(project, need, limit, target)
        or (ledger_mod.never_fits(need, here) if here is not None else None)
        or None
    )


def local_limits(store: LocalStore | None) -> dict[str, Limit]:
    """Every project's quota on this machine (target ``local``), from the store; none without one."""
    if store is None:
        return {}

    return quotas.limits(store, "local")


def waiting_count(settings: Settings, project: str) -> int:
    """How many of the project's experiments wait in this machine's queue now."""
    _, waiting, _ = ledger_for(settings).snapshot()
    return sum(1 for e in waiting if e.project == project)


def overview(settings: Settings, store: LocalStore | None = None) -> dict[str, Any]:
    """What `phalanx queue -o json` prints: the machine, what runs (holding), what waits in order
    and why (``why``), and per project its quota and recent usage (``projects``), read from the
    store when one is given. (Callers with a store run ``reconcile.reconcile`` first, so abandoned
    rows show stopped.)"""
    limits: dict[str, Limit] = {}
    if store is not None:
        with contextlib.suppress(Exception):  # reading the queue must work even if the store fails
            limits = local_limits(store)
    cap = capacity(need_gpus=True)
    now = time.time()
    with ledger_for(settings).locked() as state:
        ledger_mod.reclaim(state)
        holding, waiting = state.holding(), state.waiting(now)
        verdicts = state.judge(cap, limits, now)
        projects = {e.project for e in holding + waiting} | set(limits)
        usage = {p: (state.recent_usage(p, now), state.penalty(p, now)) for p in projects}
    held_cpus = sum(len(e.cpus) for e in holding)
    held_mem = sum(e.need.memory_mib for e in holding)

    def row(e: Entry, position: int | None) -> dict[str, Any]:
        doc = {
            "experiment_id": e.experiment_id,
            "name": e.name,
            "project": e.project,
            "state": "running" if e.holding else "queued",
            "position": position,
            "priority": e.priority,
            "effective_priority": e.effective_priority(now),
            "share_penalty": round(usage[e.project][1], 4),
            "needs": e.need.to_json(),
            "cpus": list(e.cpus),
            "gpus": list(e.gpus),
            "pid": e.pid,
            "since": e.since,
        }
        if not e.holding:
            doc["why"] = verdicts[e.experiment_id].why()
        return doc

    def project(p: str) -> dict[str, Any]:
        lim = limits.get(p)
        mine = [e for e in holding if e.project == p]
        return {
            "project": p,
            "quota": None
            if lim is None
            else {
                "cores": lim.cores,
                "gpus": lim.gpus,
                "memory_mib": lim.memory_mib,
                "max_waiting": lim.max_waiting,
            },
            "holds": {
                "cpus": sum(e.cores_held() for e in mine),
                "gpus": sum(len(e.gpus) for e in mine),
                "memory_mib": sum(e.need.memory_mib for e in mine),
            },
            "waiting": sum(1 for e in waiting if e.project == p),
            "recent_core_seconds": round(usage[p][0], 1),
            "share_penalty": round(usage[p][1], 4),
        }

    return {
        "machine": {"cpus": len(cap.cpus), "gpus": len(cap.gpus), "memory_mib": round(cap.memory_mib)},
        "free": {
            "cpus": max(0, len(cap.cpus) - held_cpus),
            "gpus": max(0, len(cap.gpus) - sum(len(e.gpus) for e in holding)),
            "memory_mib": round(max(0.0, cap.memory_mib - held_mem)),
        },
        "running": [row(e, None) for e in holding],
        "queued": [row(e, i) for i, e in enumerate(waiting, 1)],
        "projects": [project(p) for p in sorted(projects)],
    }


class ListsExperiments(Protocol):
    """What ``waiting_on_clusters`` reads: a store, or this machine's lean reader (`phalanx queue`
    stays free of SQLAlchemy when nothing else needs it)."""

    def list_experiments(self, query: ExperimentFilter, /) -> Page[Experiment]: ...


def waiting_on_clusters(store: ListsExperiments) -> list[dict[str, Any]]:
    """The experiments queued or pending on a cluster target (Slurm, Kubernetes): their engine's
    scheduler orders them, so they have a status and a reason, not a place in this machine's queue."""
    rows: list[dict[str, Any]] = []
    for status in (ExperimentStatus.QUEUED, ExperimentStatus.PENDING):
        page = store.list_experiments(ExperimentFilter(status=status, limit=500, order_by="created_at"))
        for e in page.items:
            if e.cluster:
                rows.append(
                    {
                        "experiment_id": e.id,
                        "name": e.name,
                        "project": e.project,
                        "target": e.cluster,
                        "state": str(e.status),
                        "why": e.reason or f"{e.status} on {e.cluster}",
                        "since": e.created_at,
                    }
                )
    return rows


def with_targets(doc: dict[str, Any], store: ListsExperiments | None) -> dict[str, Any]:
    """``overview``'s doc as both doors show it (`phalanx queue` here and ``GET /api/v1/queue``):
    ``target`` on the doc and on every row, and ``elsewhere``, what waits on cluster targets."""
    doc["target"] = LOCAL
    doc["elsewhere"] = [] if store is None else waiting_on_clusters(store)
    for row in doc["running"] + doc["queued"] + doc["elsewhere"]:
        row.setdefault("target", LOCAL)
    return doc
