"""What a person should hear of while an experiment lives, besides a stall (``liveness``): a rank
that straggles (slower than the ranks' median by more than PHALANX_STRAGGLER_THRESHOLD, at two
checks a minute apart, and not silent: a silent rank is a stall's) and a run that has waited in
this machine's queue longer than PHALANX_WAIT_NOTICE. Each is told once (a straggler once per
replica and attempt): on the supervisor's console, to the project's alert hooks (``Store.notice``,
a server's: docs/alerts.md) and to PHALANX_ALERT_URL / PHALANX_ALERT_COMMAND (``phalanx.alerts``).
`phalanx get` and the UI show every rank's pace as before."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from phalanx import stragglers
from phalanx.store.notice_kinds import STRAGGLING, WAITING

if TYPE_CHECKING:
    from phalanx.store.run_store import RunStore

log = logging.getLogger(__name__)

CHECK_SECONDS = 60.0  # how often the ranks' pace is read while the replicas run


class Notices:
    """Where a notice is said. ``store``: the store once it is open (None before)."""

    def __init__(
        self, experiment_id: str, store: Callable[[], RunStore | None], say: Callable[[str], None]
    ) -> None:
        self.experiment_id = experiment_id
        self.store = store
        self.say = say

    def tell(self, kind: str, replica: str | None, text: str) -> None:
        store = self.store()
        if store is not None:
            try:
                store.notice(self.experiment_id, kind, replica, text)
            except Exception as exc:  # the store may be down: supervision goes on
                log.warning("could not record the %s notice: %s", kind, exc)
        self.say(text)
        alert(kind, self.experiment_id, replica, text)


def alert(kind: str, experiment_id: str, replica: str | None, text: str) -> None:
    """``text`` to PHALANX_ALERT_URL / PHALANX_ALERT_COMMAND, when either is set (``phalanx.alerts``)."""
    from phalanx import alerts  # why: at the first notice, not in every supervisor (issue 42)

    alerts.send(alerts.Alert(kind, experiment_id, replica, text))


class StragglerWatch:
    """Reads the ranks' pace every ``every`` seconds (``check``, from the supervisor's poll)."""

    def __init__(
        self, notices: Notices, every: float = CHECK_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.notices = notices
        self.every = every
        self.clock = clock
        self._next = clock() + every
        self._suspect: str | None = None  # named by the last check: named again, it is told
        self._told: set[str] = set()

    def new_attempt(self) -> None:
        self._suspect, self._told = None, set()
        self._next = self.clock() + self.every

    def check(self) -> None:
        now = self.clock()
        store = self.notices.store()
        if now < self._next or store is None:
            return
        self._next = now + self.every
        try:
            found = stragglers.pace(store, self.notices.experiment_id)
        except Exception as exc:  # a view: the next check tries again
            log.warning("could not read the ranks' pace: %s", exc)
            return
        slow = found["straggler"] if found is not None else None
        name = str(slow["replica"]) if slow is not None and not slow.get("silent_seconds") else None
        told = name in self._told
        if found is not None and slow is not None and name is not None and name == self._suspect and not told:
            self._told.add(name)
            self.notices.tell(
                STRAGGLING,
                name,
                f"{STRAGGLING}: {name} makes {slow['steps_per_second']:.3g} steps/s, "
                f"{slow['behind_percent']:.0f} % below the ranks' median of "
                f"{found['median_steps_per_second']:.3g} (series {found['title']})",
            )
        self._suspect = name


class WaitWatch:
    """Once the run has waited ``after`` seconds in the queue (None: never), tells why it waits
    (``why``); ``check`` is called while it waits."""

    def __init__(
        self,
        notices: Notices,
        after: float | None,
        why: Callable[[], str],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.notices = notices
        self.after = after
        self.why = why
        self.clock = clock
        self.since = clock()
        self.told = False

    def check(self) -> None:
        waited = self.clock() - self.since
        if self.told or self.after is None or waited < self.after:
            return
        self.told = True
        try:
            why = self.why()
        except Exception as exc:  # the ledger could not be read: the notice goes out all the same
            why = f"`phalanx queue` says why ({exc})"
        self.notices.tell(WAITING, None, f"{WAITING}: queued for {_span(waited)}: {why}")


def _span(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"
