"""The supervisor's place in this machine's queue: admission by the ledger (waiting, recorded as
queued, until the whole topology fits) and the reason of a stop that came while it waited.

Functions of ``Supervisor`` (its methods, bound in its class body: ``_x = module._x``), kept here
so that each module of the supervisor has one job."""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from phalanx.domain import ExperimentStatus

if TYPE_CHECKING:
    from pathlib import Path

    from phalanx.supervisor.supervising import Supervisor

log = logging.getLogger(__name__)


def _admit(self: Supervisor) -> None:
    """Take this experiment's cores, GPUs and memory in the machine's ledger, waiting in the
    queue (recorded as queued) until its whole topology fits; the dry run is redone with the
    exact cores and GPUs granted. Cluster engines schedule for themselves, and --oversubscribe
    asks to share: neither goes through the ledger, nor does a topology that requests nothing."""

    from phalanx import queue, reconcile
    from phalanx.errors import UsageError

    context = self.p.context
    if self.p.backend.name != "local" or context.oversubscribe:
        return
    need = queue.need_of_plan(self.p.plan)
    if need.empty:
        return
    admission = queue.Admission(
        self.id,
        need,
        queue.ledger_for(self.settings),
        name=self.p.plan.name,
        priority=self.priority,
        wait=self.wait,
        project=self.p.plan.project,
        limits=self._quotas,
    )
    self._admission = admission
    # its row before its ledger entry: `phalanx queue` (which reads the ledger) never lists an
    # id that `phalanx get` does not know, nor does a killed supervisor leave such an entry.
    # Not with --no-wait: there the row means "accepted" to `run -d`/submit() waiting for it, so
    # it follows the grant (a refusal then records nothing at all)
    recorded_here = self.wait and not self._created
    if recorded_here:
        self._open_store()
        self._create(ExperimentStatus.STARTING)
        self._created = True
    was_queued = False

    def queued(text: str) -> None:
        nonlocal was_queued
        was_queued = True
        self._open_store()
        if self._created:  # it exists: only its status says it waits
            self.store.update_experiment(self.id, status=ExperimentStatus.QUEUED)
        else:
            self._create(ExperimentStatus.QUEUED)
            self._created = True
        with contextlib.suppress(Exception):  # others' leftovers must not stop this experiment
            reconcile.stop_abandoned(self.store, admission.reclaimed or [])
        self.observer.message(text)

    try:
        grant = admission.admit(self._stop_requested, queued)
    except BaseException as exc:
        self._admission = None  # admit() left nothing in the ledger
        if recorded_here and isinstance(exc, UsageError):  # refused: nothing half-written
            with contextlib.suppress(Exception):
                self.store.delete_experiment(self.id)
                self._created = False
        raise
    if grant is None:  # stopped while it waited: already out of the queue
        self._admission = None
        self.stop_reason = _queued_reason(self.stop_reason, self.run_dir / "stop")
        return
    self.started = time.monotonic()  # time spent queued does not count against max_run_seconds
    context = replace(context, cpu_pool=grant.cpus, gpu_pool=grant.gpus)
    self.p = replace(self.p, context=context, dry_run=self.p.backend.dry_run(self.p.plan, context))
    if was_queued:
        self.observer.message("admitted: " + need.describe())


def _after_admission(self: Supervisor) -> None:
    """Queued rows of `phalanx run`s killed while waiting, found while we were admitted."""
    if self._admission is not None and self._admission.reclaimed:
        from phalanx import reconcile

        with contextlib.suppress(Exception):
            reconcile.stop_abandoned(self.store, self._admission.reclaimed)


def _queued_reason(reason: str | None, stop_file: Path) -> str:
    """The reason of an experiment stopped before it left the queue: it never ran, so "stopped by
    SIGTERM" (the signal `phalanx stop` sends) told the user less than the truth. A reason left
    with the request (a group's stop or pruning) is kept as it is; else it says a stop request or
    the signal did it."""
    requested = _requested_reason(stop_file)
    if requested:
        return requested
    how = "a stop request" if stop_file.exists() else (reason or "stopped").removeprefix("stopped by ")
    return f"stopped while queued (by {how})"


def _requested_reason(path: Any) -> str | None:
    """The reason written on the stop file's second line (a group's pruning says why), if any."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    return lines[1].strip() or None if len(lines) > 1 else None
