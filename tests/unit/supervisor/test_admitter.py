"""Admitter: the experiment's place in this machine's queue. Its row is recorded before its ledger
entry; it waits recorded as queued; a stop while it waits ends it as "stopped while queued"; a
refusal leaves nothing behind; the grant's cores reach the dry run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from phalanx import queue
from phalanx.config import Settings
from phalanx.domain import ExperimentStatus
from phalanx.errors import UsageError
from phalanx.machine.ledger import Ledger, Need
from phalanx.share import Limit, Quota
from phalanx.spec.loader import load_spec_text
from phalanx.store import quotas
from phalanx.store.sql import SqlStore
from phalanx.supervisor.admitting import Admitter
from phalanx.supervisor.clock import RunClock
from phalanx.supervisor.opener import LazyStore
from phalanx.supervisor.preparing import Prepared, prepare
from phalanx.supervisor.recording import Recorder, replicas_of
from phalanx.supervisor.stopping import StopRequests, write_stop_request
from tests.unit.supervisor.fakes import FakeObserver

ONE_CORE = (
    "version: 1\nkind: experiment\nenvironment:\n  resources:\n    cpu: {limits: 1}\n"
    "run:\n  cmd: python train.py\n"
)


def prepared_with(settings: Settings, tmp_path: Path, text: str = ONE_CORE, **kw: object) -> Prepared:
    return prepare(
        load_spec_text(text), settings=settings, workdir=tmp_path, experiment_id="e1", dry=True, **kw
    )  # type: ignore[arg-type]


def admitter(
    prepared: Prepared,
    store: SqlStore,
    ledger: Ledger,
    observer: FakeObserver,
    settings: Settings,
    *,
    wait: bool = True,
) -> Admitter:
    lazy = LazyStore(store)
    rows = Recorder(
        "e1", replicas_of(prepared), lazy, observer, elapsed=lambda: 0.0, spool_dir=settings.spool_dir / "e1"
    )
    stop = StopRequests(settings.runs_dir / "e1")
    return Admitter(
        ledger, lazy, rows, observer, stop, RunClock(), wait=wait, database_url=settings.database_url
    )


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    return Ledger(tmp_path / "ledger.json")


def hold_every_core(ledger: Ledger) -> None:
    """Another experiment (of this live process) holds all of this machine's cores."""
    cores = len(os.sched_getaffinity(0))
    grant, _ = ledger.admit("blocker", Need(cpus=cores), queue.capacity(need_gpus=False))
    assert grant is not None


def ids(entries: list[queue.Entry]) -> list[str]:
    return [e.experiment_id for e in entries]


def test_a_fitting_experiment_is_recorded_then_granted_its_cores_until_released(
    settings: Settings, tmp_path: Path, store: SqlStore, ledger: Ledger, observer: FakeObserver
) -> None:
    prepared = prepared_with(settings, tmp_path)
    admission = admitter(prepared, store, ledger, observer, settings)
    admitted = admission.admit(prepared)
    holding, waiting, _ = ledger.snapshot()
    assert ids(holding) == ["e1"] and waiting == []
    assert len(admitted.context.cpu_pool or ()) == 1 and admitted.context.cpu_pool == holding[0].cpus
    assert admitted.dry_run.context.cpu_pool == admitted.context.cpu_pool  # the dry run was redone
    assert store.get_experiment("e1").status is ExperimentStatus.STARTING  # its row came first
    assert observer.messages == []  # it never waited
    admission.release()
    assert ledger.snapshot()[0] == []


def test_oversubscribe_and_cluster_engines_do_not_queue(
    settings: Settings, tmp_path: Path, store: SqlStore, ledger: Ledger, observer: FakeObserver
) -> None:
    prepared = prepared_with(settings, tmp_path, oversubscribe=True)
    admission = admitter(prepared, store, ledger, observer, settings)
    assert admission.admit(prepared) is prepared
    assert ledger.snapshot()[:2] == ([], []) and store.list_experiments().items == []
    admission.release()  # nothing to leave


def test_a_stop_while_queued_ends_the_wait_recorded_as_queued(
    settings: Settings, tmp_path: Path, store: SqlStore, ledger: Ledger, observer: FakeObserver
) -> None:
    hold_every_core(ledger)
    prepared = prepared_with(settings, tmp_path)
    admission = admitter(prepared, store, ledger, observer, settings)
    write_stop_request(settings, "e1")  # `phalanx stop` while it waits
    assert admission.admit(prepared) is prepared
    assert admission.stop.reason == "stopped while queued (by a stop request)"
    assert store.get_experiment("e1").status is ExperimentStatus.QUEUED
    assert observer.messages[0].startswith("queued (position 1 of 1): waiting for 1 core")
    assert ids(ledger.snapshot()[1]) == []  # out of the queue


def test_no_wait_on_a_busy_machine_is_refused_and_records_nothing(
    settings: Settings, tmp_path: Path, store: SqlStore, ledger: Ledger, observer: FakeObserver
) -> None:
    hold_every_core(ledger)
    prepared = prepared_with(settings, tmp_path)
    with pytest.raises(UsageError, match="--no-wait: the experiment does not fit now"):
        admitter(prepared, store, ledger, observer, settings, wait=False).admit(prepared)
    assert store.list_experiments().items == []
    assert ids(ledger.snapshot()[0]) == ["blocker"] and ledger.snapshot()[1] == []


def test_a_need_that_can_never_fit_is_refused_and_its_row_withdrawn(
    settings: Settings, tmp_path: Path, store: SqlStore, ledger: Ledger, observer: FakeObserver
) -> None:
    quotas.put(store, Quota("default", "local", Limit(cores=1)))  # never two cores at once
    text = ONE_CORE.replace("limits: 1", "limits: 2")
    prepared = prepared_with(settings, tmp_path, text)
    with pytest.raises(UsageError, match="quota"):
        admitter(prepared, store, ledger, observer, settings).admit(prepared)
    assert store.list_experiments().items == []  # recorded before its ledger entry, then withdrawn
    assert ledger.snapshot()[:2] == ([], [])
