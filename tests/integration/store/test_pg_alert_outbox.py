"""tests/unit/store/test_alert_outbox.py on PostgreSQL (SQLite: tests/unit; see conftest.py), and
the race only PostgreSQL has: two writers ending the same experiment (or group) at once. SQLite's
one writer holds the whole database; on PostgreSQL each end reads the status it replaces under a
row lock, so the second writer sees the first one's end and queues nothing."""

import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from sqlalchemy import Table, select, text
from tests.support.sandbox import wait_for
from tests.unit.server import fill
from tests.unit.store.test_alert_group_finished import _group
from tests.unit.store.test_alert_outbox import *  # noqa: F403
from tests.unit.store.test_alert_outbox import SECRET

from phalanx.domain import EventKind, ExperimentStatus, GroupStatus
from phalanx.store.alerts import alert_book
from phalanx.store.sql import SqlStore
from phalanx.store.sql.models import ExperimentRow, GroupRow


def _two_ends_at_once(store: SqlStore, table: Table, row_id: str, ends: list[Callable[[], object]]) -> None:
    """Hold ``row_id``'s row locked, let two writers call ``ends`` (both then wait on the lock, as
    PostgreSQL's pg_locks shows), and release it: they write one after the other."""
    with store.engine.connect() as holder:
        holder.execute(select(table.c.id).where(table.c.id == row_id).with_for_update())

        def waiting() -> bool:  # writers of this test's own database, waiting on a lock
            with store.engine.connect() as conn:
                waiters = conn.execute(
                    text(
                        "SELECT count(*) FROM pg_stat_activity"
                        " WHERE datname = current_database() AND wait_event_type = 'Lock'"
                    )
                ).scalar_one()
            return int(waiters) >= 2

        with ThreadPoolExecutor(2) as pool:
            writes = [pool.submit(end) for end in ends]
            wait_for(waiting, what="both writers waiting on the row's lock")
            holder.rollback()  # the lock goes
            for done in writes:
                done.result()


def test_two_writers_ending_one_experiment_at_once_queue_one_delivery(store: SqlStore) -> None:
    book = alert_book(store)
    hook = book.add_hook("A", "http://127.0.0.1:9/a", ["stopped"], SECRET, "ada")
    exp = fill.experiment(store, project="A", status=ExperimentStatus.RUNNING)
    _two_ends_at_once(
        store,
        ExperimentRow,  # type: ignore[arg-type]
        exp.id,
        [
            functools.partial(store.update_experiment, exp.id, status=ExperimentStatus.STOPPED, reason=r)
            for r in "ab"
        ],
    )
    assert len(book.deliveries(hook.id)) == 1


def test_two_writers_ending_one_group_at_once_queue_one_delivery(store: SqlStore) -> None:
    book = alert_book(store)
    hook = book.add_hook("A", "http://127.0.0.1:9/a", ["group.finished"], SECRET, "ada")
    group = _group(store)
    _two_ends_at_once(
        store,
        GroupRow,  # type: ignore[arg-type]
        group.id,
        [functools.partial(store.update_group, group.id, status=GroupStatus.STOPPED, reason=r) for r in "ab"],
    )
    assert len(book.deliveries(hook.id)) == 1


def test_a_scripts_status_event_and_the_supervisors_end_at_once_queue_one_delivery(store: SqlStore) -> None:
    book = alert_book(store)
    hook = book.add_hook("A", "http://127.0.0.1:9/a", ["succeeded"], SECRET, "ada")
    exp = fill.experiment(store, project="A", status=ExperimentStatus.RUNNING)
    done = fill.event(exp.id, EventKind.STATUS, {"status": "succeeded"})
    _two_ends_at_once(
        store,
        ExperimentRow,  # type: ignore[arg-type]
        exp.id,
        [lambda: store.write_events([done]), lambda: store.update_experiment(exp.id, status="succeeded")],
    )
    assert [d.event for d in book.deliveries(hook.id)] == ["experiment.succeeded"]
