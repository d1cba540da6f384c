"""The experiment's place in this machine's queue: admission by the ledger (waiting, recorded as
queued, until the whole topology fits), its entry released once the replicas are gone, and the queued
rows of killed waiters that the ledger reclaimed on the way (stopped, as ``reconcile`` says)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from phalanx import knobs, queue, reconcile
from phalanx.domain import ExperimentStatus
from phalanx.errors import UsageError
from phalanx.store.lite import LiteReader
from phalanx.store.migrations import HEAD
from phalanx.supervisor.notices import Notices, WaitWatch
from phalanx.supervisor.preparing import Prepared

if TYPE_CHECKING:
    from phalanx.share import Limit
    from phalanx.supervisor.clock import RunClock
    from phalanx.supervisor.opener import LazyStore
    from phalanx.supervisor.outcome import Observer
    from phalanx.supervisor.recording import Recorder
    from phalanx.supervisor.stopping import StopRequests

log = logging.getLogger(__name__)


class Admitter:
    """``ledger``: this machine's ledger (``queue.ledger_for``); ``rows``: the experiment's rows
    (recorded before its ledger entry, see ``admit``); ``stop``: checked while it waits; ``clock``:
    restarted once admitted (the wait is not shown as elapsed). ``priority``: its place in the queue
    (higher first); ``wait``: False refuses (UsageError) instead of queueing when the topology does
    not fit now. ``notices``: where a wait longer than PHALANX_WAIT_NOTICE is told (None: nowhere).
    ``entry``: the ledger's ``queue.Admission`` while it holds the experiment."""

    def __init__(
        self,
        ledger: queue.Ledger,
        store: LazyStore,
        rows: Recorder,
        observer: Observer,
        stop: StopRequests,
        clock: RunClock,
        *,
        priority: int = 0,
        wait: bool = True,
        notices: Notices | None = None,
        database_url: str,
    ) -> None:
        """``database_url``: the store's, for reading quotas without opening the full store."""
        self.ledger = ledger
        self.database_url = database_url
        self.store = store
        self.rows = rows
        self.observer = observer
        self.stop = stop
        self.clock = clock
        self.priority = priority
        self.wait = wait
        self.notices = notices
        self.entry: queue.Admission | None = None

    def admit(self, prepared: Prepared) -> Prepared:
        """Take the experiment's cores, GPUs and memory in the machine's ledger, waiting in the
        queue (recorded as queued) until its whole topology fits; returns it with the dry run
        redone for the exact cores and GPUs granted (unchanged when it needs no admission, or a
        stop came while it waited: ``stop.reason`` then says so). Cluster engines schedule for
        themselves, and --oversubscribe asks to share: neither goes through the ledger, nor does a
        topology that requests nothing. UsageError: refused (it can never fit, or `--no-wait`)."""
        context = prepared.context
        if prepared.backend.name != "local" or context.oversubscribe:
            return prepared
        need = queue.need_of_plan(prepared.plan)
        if need.empty:
            return prepared
        entry = queue.Admission(
            prepared.experiment_id,
            need,
            self.ledger,
            name=prepared.plan.name,
            priority=self.priority,
            wait=self.wait,
            project=prepared.plan.project,
            limits=self._quotas,
        )
        self.entry = entry
        # its row before its ledger entry: `phalanx queue` (which reads the ledger) never lists an
        # id that `phalanx get` does not know, nor does a killed supervisor leave such an entry.
        # Not with --no-wait: there the row means "accepted" to `run -d`/submit() waiting for it, so
        # it follows the grant (a refusal then records nothing at all)
        recorded_here = self.wait and not self.rows.created
        if recorded_here:
            self.rows.create(prepared, ExperimentStatus.STARTING)
        was_queued = False

        def queued(text: str) -> None:
            nonlocal was_queued
            was_queued = True
            if self.rows.created:  # it exists: only its status says it waits
                self.rows.status(ExperimentStatus.QUEUED)
            else:
                self.rows.create(prepared, ExperimentStatus.QUEUED)
            if entry.reclaimed:  # others' leftovers (the full store's to stop) must not stop this one
                with contextlib.suppress(Exception):
                    reconcile.stop_abandoned(self.store.full(), entry.reclaimed)
            self.observer.message(text)

        watch = None
        if self.notices is not None:
            watch = WaitWatch(self.notices, knobs.WAIT_NOTICE.value() or None, entry.why)
        try:
            grant = entry.admit(self.stop.requested, queued, None if watch is None else watch.check)
        except BaseException as exc:
            self.entry = None  # admit() left nothing in the ledger
            if recorded_here and isinstance(exc, UsageError):  # refused: nothing half-written
                self.rows.withdraw(f"refused by this machine's queue: {exc}")
            raise
        if grant is None:  # stopped while it waited: already out of the queue
            self.entry = None
            self.stop.stopped_while_queued()
            return prepared
        self.clock.restart()  # time spent queued is not the experiment's
        context = replace(context, cpu_pool=grant.cpus, gpu_pool=grant.gpus)
        admitted = replace(
            prepared, context=context, dry_run=prepared.backend.dry_run(prepared.plan, context)
        )
        if was_queued:
            self.observer.message("admitted: " + need.describe())
        return admitted

    def stop_abandoned(self) -> None:
        """Queued rows of `phalanx run`s killed while waiting, found while we were admitted."""
        if self.entry is not None and self.entry.reclaimed:
            with contextlib.suppress(Exception):
                reconcile.stop_abandoned(self.store.full(), self.entry.reclaimed)

    def release(self) -> None:
        """Leave the ledger (after the replicas are gone: their cores are free)."""
        if self.entry is not None:
            self.entry.release()

    def _quotas(self) -> Mapping[str, Limit]:
        """Every project's quota on this machine, from the store (read again while it waits):
        through the lean reader where it can (an up-to-date SQLite file: no SQLAlchemy)."""
        reader = LiteReader.open(self.database_url, HEAD)
        if reader is None:
            return queue.local_limits(self.store.full())
        with reader:
            return reader.limits("local")
