"""An experiment's end queues one delivery per hook of its project that asked for it, in the
transaction that records the end, whoever writes it (the supervisor's update, reconcile, a script's
ingested status), and never twice for one end; the deliverer sends it signed and tries again with
back-off (a hand-moved clock: no waiting)."""

from __future__ import annotations

import json

import pytest

from phalanx.domain import EventKind, ExperimentStatus, ReplicaState
from phalanx.errors import NotFound, UsageError
from phalanx.server.alerting import DELIVERY, Deliverer, Retry
from phalanx.store.alerts import alert_book, outbox
from phalanx.store.sql import SqlStore
from tests.support.clock import ManualClock
from tests.support.webhooks import LOOPBACK, Receiver
from tests.unit.server import fill

SECRET = "0123456789abcdef-secret"


def _failed(store: SqlStore, project: str = "A") -> str:
    """An experiment of ``project`` whose worker-1 failed first, then ended failed (as the
    supervisor records it: the replica's state, then the experiment's end)."""
    exp = fill.experiment(store, project=project, status=ExperimentStatus.RUNNING)
    store.update_replica(
        exp.id, "worker-1", state=ReplicaState.FAILED, reason="exited with code 3", finished_at=1.0
    )
    store.update_replica(exp.id, "master", state=ReplicaState.STOPPED, finished_at=2.0)
    store.update_experiment(
        exp.id, status=ExperimentStatus.FAILED, reason="worker-1 failed: exited with code 3"
    )
    return exp.id


def test_an_end_is_queued_once_for_each_hook_that_asked_for_it(store: SqlStore) -> None:
    book = alert_book(store)
    on_failed = book.add_hook("A", "http://127.0.0.1:9/a", ["failed"], SECRET, "ada")
    book.add_hook("A", "http://127.0.0.1:9/b", ["succeeded"], SECRET, "ada")
    elsewhere = book.add_hook("B", "http://127.0.0.1:9/c", ["failed"], SECRET, "ada")
    exp_id = _failed(store)
    store.update_experiment(exp_id, status=ExperimentStatus.FAILED, reason="written again")  # no new event

    (delivery,) = book.deliveries(on_failed.id)
    assert (delivery.experiment_id, delivery.event, delivery.state) == (
        exp_id,
        "experiment.failed",
        "pending",
    )
    assert book.deliveries(elsewhere.id) == []
    (due,) = outbox(store).claim_due(now=2e9, lease=60)
    payload = json.loads(due.payload)
    assert payload["reason"] == "exited with code 3"  # the failing replica's own, as stored
    assert (payload["replica"], payload["project"], payload["status"]) == ("worker-1", "A", "failed")
    assert outbox(store).claim_due(now=2e9, lease=60) == []  # claimed: not handed out twice


def test_a_scripts_own_status_event_is_an_end_too(store: SqlStore) -> None:
    hook = alert_book(store).add_hook("A", "http://127.0.0.1:9/a", ["succeeded"], SECRET, None)
    exp = fill.experiment(store, project="A", status=ExperimentStatus.RUNNING)
    done = fill.event(exp.id, EventKind.STATUS, {"status": "succeeded"})
    store.write_events([done, fill.event(exp.id, EventKind.STATUS, {"status": "succeeded"}, "worker-0")])
    assert [d.event for d in alert_book(store).deliveries(hook.id)] == ["experiment.succeeded"]


def test_a_resumed_experiment_that_ends_again_is_a_new_event(store: SqlStore) -> None:
    hook = alert_book(store).add_hook("A", "http://127.0.0.1:9/a", ["failed", "stopped"], SECRET, None)
    exp_id = _failed(store)
    store.reopen_experiment(exp_id)
    store.update_experiment(exp_id, status=ExperimentStatus.STOPPED, reason="stopped by ada")
    assert [d.event for d in alert_book(store).deliveries(hook.id)] == [
        "experiment.stopped",
        "experiment.failed",
    ]


def test_a_receiver_answering_500_twice_gets_it_on_the_third_try(store: SqlStore) -> None:
    clock = ManualClock(2e9)
    with Receiver([500, 500]) as receiver:
        hook = alert_book(store).add_hook("A", receiver.url, ["failed"], SECRET, None)
        exp_id = _failed(store)
        deliverer = Deliverer(
            outbox(store), "https://phalanx.example", Retry(attempts=5, backoff=10), clock, guard=LOOPBACK
        )
        assert deliverer.run_once() == 1  # 500
        clock.now += 9.9
        assert deliverer.run_once() == 0  # not due before its back-off
        clock.now += 0.1
        assert deliverer.run_once() == 1  # 500 again: next in 20 s
        clock.now += 20
        assert deliverer.run_once() == 1  # 200
        clock.now += 3600
        assert deliverer.run_once() == 0  # delivered: never again
        got = receiver.wait_for(3)
    assert len(got) == 3 and len({r.headers[DELIVERY.lower()] for r in got}) == 1  # one delivery, 3 tries
    assert all(r.signed_by(SECRET) for r in got) and not got[0].signed_by("another-secret-0123")
    body = json.loads(got[-1].body)
    assert body["url"] == f"https://phalanx.example/experiments/{exp_id}"
    assert body["reason"] == "exited with code 3" and body["event"] == "experiment.failed"
    (delivery,) = alert_book(store).deliveries(hook.id)
    assert delivery.state == "delivered"
    assert [a.status_code for a in delivery.attempts] == [500, 500, 200]


def test_a_delivery_is_given_up_after_its_last_try(store: SqlStore) -> None:
    clock = ManualClock(2e9)
    hook = alert_book(store).add_hook(
        "A", "http://127.0.0.1:9/nobody", ["failed"], SECRET, None
    )  # port 9: refused
    _failed(store)
    deliverer = Deliverer(
        outbox(store), "http://x", Retry(attempts=2, backoff=1, timeout=5), clock, guard=LOOPBACK
    )
    assert deliverer.run_once() == 1
    clock.now += 1
    assert deliverer.run_once() == 1
    clock.now += 3600
    assert deliverer.run_once() == 0
    (delivery,) = alert_book(store).deliveries(hook.id)
    assert delivery.state == "failed" and len(delivery.attempts) == 2
    assert delivery.attempts[0].status_code is None and "no answer" in (delivery.attempts[0].error or "")


def test_a_removed_hooks_pending_deliveries_are_never_sent(store: SqlStore) -> None:
    book = alert_book(store)
    hook = book.add_hook("A", "http://127.0.0.1:9/a", ["failed"], SECRET, None)
    _failed(store)
    book.remove_hook(hook.id)
    assert outbox(store).claim_due(now=2e9, lease=60) == []
    with pytest.raises(NotFound):
        book.deliveries(hook.id)


@pytest.mark.parametrize(
    ("url", "events", "secret", "says"),
    [
        ("ftp://host/x", ["failed"], None, "http:// or https://"),
        ("http://host/x", ["exploded"], None, "failed,succeeded,stopped"),
        ("http://host/x", [], None, "give one or more"),
        ("http://host/x", ["failed"], "short", "16 to 256"),
        ("http://host:port/x", ["failed"], None, "http:// or https://"),
        ("http://host/x\x00", ["failed"], None, "http:// or https://"),
        ("http://host/x", ["failed"], "sixteen\x00characters", "printable"),
    ],
)
def test_a_bad_hook_is_refused_saying_how_to_fix_it(
    store: SqlStore, url: str, events: list[str], secret: str | None, says: str
) -> None:
    with pytest.raises(UsageError, match=says):
        alert_book(store).add_hook("A", url, events, secret, None)
    assert alert_book(store).hooks() == []
