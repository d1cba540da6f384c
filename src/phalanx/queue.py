"""This machine's queue, as the supervisor, `phalanx queue`, `phalanx stop` and Python callers use it.

The ledger itself (``phalanx.ledger``) knows processes and resources only; this module ties it to
plans and to the store:

* ``Admission``: what the supervisor of a local experiment does before starting anything: ask the
  ledger; if the whole topology does not fit, record the experiment as ``queued`` and wait (the
  stop file, Ctrl-C and SIGTERM are honoured while waiting) until it does.
* ``overview(settings)``: what runs and what waits, in queue order (`phalanx queue -o json`).
* ``reconcile(store, settings)``: a queued experiment whose `phalanx run` was killed while it waited
  is marked stopped (nothing else would ever end it).

Every launch path goes through the supervisor (`phalanx run`, `--detach`, estimator ``submit()``,
a search's trials), so they all queue the same way.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from phalanx import ledger as ledger_mod
from phalanx.domain import ExperimentStatus, ReplicaState
from phalanx.ledger import Capacity, Entry, Grant, Ledger, Need, NeverFits, NoRoom

if TYPE_CHECKING:
    from phalanx.config import Settings
    from phalanx.plan import Plan
    from phalanx.store.base import Store

# How often a waiter looks at the ledger file's identity (a stat, no lock); it takes the lock and
# tries again as soon as the file changed (someone ended or joined), and at least every RETRY_SECONDS
# (to reclaim the entries of killed processes).
LOOK_SECONDS = 0.05
RETRY_SECONDS = 0.5
ABANDONED = "its phalanx run ended while it was queued (killed?)"
# --priority bounds: aging adds one per 10 minutes waited, so 1000 already outranks a week of waiting
MAX_PRIORITY = 1000

__all__ = [
    "ABANDONED",
    "MAX_PRIORITY",
    "Admission",
    "Capacity",
    "Entry",
    "Grant",
    "Ledger",
    "Need",
    "NeverFits",
    "NoRoom",
    "capacity",
    "check_priority",
    "ledger_for",
    "need_of_plan",
    "overview",
    "reconcile",
    "stop_if_abandoned",
]


def ledger_for(settings: Settings) -> Ledger:
    return Ledger(ledger_mod.ledger_path(settings.home))


def need_of_plan(plan: Plan) -> Need:
    return ledger_mod.need_of([(r.resources, r.processes) for r in plan.replicas])


def capacity(need_gpus: bool = True) -> Capacity:
    """The cores this process may run on, the machine's memory, and its GPUs (nvidia-smi is asked
    only when ``need_gpus``: a CPU experiment does not pay for it)."""
    from phalanx import limits

    cpus = tuple(sorted(os.sched_getaffinity(0)))
    gpus = limits.detect_gpus() if need_gpus else ()
    return Capacity(cpus=cpus, gpus=gpus, memory_mib=limits._mem_total_mib())


@dataclass
class Admission:
    """One experiment's way through the queue (used by the Supervisor, once, before it submits).

    ``wait``: queue when it does not fit (False: raise UsageError at once, `--no-wait`).
    ``stop``: returns True when a stop was asked for (checked while waiting).
    ``on_queued``: called once, when the experiment has to wait (the supervisor records it queued).
    """

    experiment_id: str
    need: Need
    ledger: Ledger
    name: str = ""
    priority: int = 0
    wait: bool = True
    reclaimed: list[Entry] | None = None

    def admit(
        self,
        stop: Callable[[], bool],
        on_queued: Callable[[str], None],
        on_retry: Callable[[], None] | None = None,
    ) -> Grant | None:
        """The grant once the experiment fits; None if a stop came while it waited (it is then out
        of the queue). Raises UsageError for a need this machine can never meet, or with ``wait``
        false for one that does not fit now."""
        from phalanx.errors import UsageError

        cap = capacity(need_gpus=self.need.gpus > 0)
        self.reclaimed = []
        try:
            grant, _ = self._try(cap)
        except NeverFits as exc:
            raise UsageError(f"{exc}; lower what was counted, or pass --oversubscribe") from None
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
                + (f"; running now: {held}" if held else "")
                + "; `phalanx queue` shows the queue"
            )
            seen = self.ledger.version()
            last = time.monotonic()
            while True:
                if stop():
                    self.ledger.release(self.experiment_id)
                    return None
                time.sleep(LOOK_SECONDS)
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

    def _try(self, cap: Capacity) -> tuple[Grant | None, list[Entry]]:
        grant, gone = self.ledger.admit(
            self.experiment_id,
            self.need,
            cap,
            name=self.name,
            priority=self.priority,
            wait=self.wait,
        )
        assert self.reclaimed is not None
        self.reclaimed.extend(gone)
        return grant, gone

    def release(self) -> None:
        self.ledger.release(self.experiment_id)


def mark_abandoned(store: Store, entries: list[Entry]) -> None:
    """Waiting entries of killed `phalanx run`s: their queued rows are marked stopped."""
    for e in entries:
        if not e.holding:
            _stop_queued(store, e.experiment_id)


def _stop_queued(store: Store, experiment_id: str) -> None:
    from phalanx.errors import NotFound

    try:
        exp = store.get_experiment(experiment_id)
    except NotFound:
        return
    if exp.status is not ExperimentStatus.QUEUED:
        return
    now = time.time()
    for r in store.list_replicas(exp.id):
        if not r.state.done:
            store.update_replica(exp.id, r.name, state=ReplicaState.STOPPED, finished_at=now)
    store.update_experiment(exp.id, status=ExperimentStatus.STOPPED, reason=ABANDONED, finished_at=now)


def abandoned_here(settings: Settings, experiment_id: str) -> bool:
    """Whether this machine's `phalanx run` of the experiment is gone: its pid file stays behind
    when it is killed. No pid file here: another machine's run (a shared store), not ours to judge."""
    from phalanx.procs import pid_alive

    try:
        pid = int((settings.runs_dir / experiment_id / "supervisor.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return False
    return not pid_alive(pid)


def check_priority(priority: object, given_as: str) -> int:
    """A queue priority as given (``--priority``, ``submit(priority=)``): a whole number within
    ±MAX_PRIORITY, else a UsageError naming where it was given."""
    from phalanx.errors import UsageError

    if not isinstance(priority, int) or isinstance(priority, bool) or abs(priority) > MAX_PRIORITY:
        raise UsageError(
            f"{given_as} {priority!r}: give a whole number from -{MAX_PRIORITY} to {MAX_PRIORITY}"
            " (higher starts first; a waiting run also gains one point per 10 minutes)"
        )
    return priority


def stop_if_abandoned(store: Store, settings: Settings, experiment_id: str) -> bool:
    """Mark the queued experiment stopped if this machine's `phalanx run` of it is gone (killed
    while it waited); whether it was gone."""
    if not abandoned_here(settings, experiment_id):
        return False
    _stop_queued(store, experiment_id)
    return True


def reconcile(store: Store, settings: Settings) -> list[str]:
    """Mark stopped every queued experiment nobody waits for any more (its `phalanx run` was
    killed); returns their ids. Dead ledger entries are reclaimed on the way."""
    from phalanx.store.base import ExperimentFilter

    queued = store.list_experiments(ExperimentFilter(status=ExperimentStatus.QUEUED, limit=1000)).items
    if not queued:
        return []
    holding, waiting, _ = ledger_for(settings).snapshot()
    known = {e.experiment_id for e in holding + waiting}
    ended: list[str] = []
    for exp in queued:
        if exp.id not in known and stop_if_abandoned(store, settings, exp.id):
            ended.append(exp.id)
    return ended


def overview(settings: Settings, store: Store | None = None) -> dict[str, Any]:
    """What `phalanx queue -o json` prints: the machine, what runs (holding), what waits in order."""
    if store is not None:
        with contextlib.suppress(Exception):  # reading the queue must work even if the store fails
            reconcile(store, settings)
    holding, waiting, _ = ledger_for(settings).snapshot()
    cap = capacity(need_gpus=True)
    now = time.time()
    held_cpus = sum(len(e.cpus) for e in holding)
    held_mem = sum(e.need.memory_mib for e in holding)

    def row(e: Entry, position: int | None) -> dict[str, Any]:
        return {
            "experiment_id": e.experiment_id,
            "name": e.name,
            "state": "running" if e.holding else "queued",
            "position": position,
            "priority": e.priority,
            "effective_priority": e.effective_priority(now),
            "needs": e.need.to_json(),
            "cpus": list(e.cpus),
            "gpus": list(e.gpus),
            "pid": e.pid,
            "since": e.since,
        }

    return {
        "ledger": str(ledger_for(settings).path),
        "machine": {"cpus": len(cap.cpus), "gpus": len(cap.gpus), "memory_mib": round(cap.memory_mib)},
        "free": {
            "cpus": max(0, len(cap.cpus) - held_cpus),
            "gpus": max(0, len(cap.gpus) - sum(len(e.gpus) for e in holding)),
            "memory_mib": round(max(0.0, cap.memory_mib - held_mem)),
        },
        "running": [row(e, None) for e in holding],
        "queued": [row(e, i) for i, e in enumerate(waiting, 1)],
    }
