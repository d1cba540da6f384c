"""A stalled replica (the supervisor's watchdog notice) queues one ``experiment.stalled`` delivery per
hook of the experiment's project that asked for stalls, in the transaction that writes the notice as
the experiment's reason; the deliverer sends it signed, naming the replica, with the experiment's
address and a line a chat shows. A hook may ask for it as ``stalled`` or ``experiment.stalled``."""

from __future__ import annotations

import json

import pytest

from phalanx.domain import ExperimentStatus
from phalanx.errors import UsageError
from phalanx.server.alerting import EVENT, Deliverer, Retry
from phalanx.store.alert_records import check_hook
from phalanx.store.alerts import alert_book, outbox
from phalanx.store.sql import SqlStore
from tests.support.clock import ManualClock
from tests.support.webhooks import LOOPBACK, Receiver
from tests.unit.server import fill

SECRET = "0123456789abcdef-secret"
WHAT = "worker-1 made no progress (no step, no output, no CPU time) for 62 s"
NOTICE = f"stalled: {WHAT}"  # as the watchdog words the experiment's reason


def test_a_stall_notice_is_the_reason_and_one_delivery_for_each_hook_that_asked(store: SqlStore) -> None:
    book = alert_book(store)
    told = book.add_hook("A", "http://127.0.0.1:9/a", ["experiment.stalled", "failed"], SECRET, "ada")
    ends_only = book.add_hook("A", "http://127.0.0.1:9/b", ["failed"], SECRET, None)
    elsewhere = book.add_hook("B", "http://127.0.0.1:9/c", ["stalled"], SECRET, None)
    exp = fill.experiment(store, name="ddp", project="A", status=ExperimentStatus.RUNNING)
    store.notice(exp.id[:8], "stalled", "worker-1", NOTICE)
    assert store.get_experiment(exp.id).reason == NOTICE
    (due,) = outbox(store).claim_due(now=2e9, lease=60)
    payload = json.loads(due.payload)
    assert {k: v for k, v in payload.items() if k != "noticed_at"} == {
        "event": "experiment.stalled",
        "project": "A",
        "experiment_id": exp.id,
        "name": "ddp",
        "status": "stalled",
        "reason": WHAT,  # the receiver's "reason": what stalled, without the word again
        "replica": "worker-1",
    }
    assert [d.experiment_id for d in book.deliveries(told.id)] == [exp.id]
    assert book.deliveries(ends_only.id) == [] and book.deliveries(elsewhere.id) == []
    assert told.events == ("stalled", "failed")  # kept as the experiment's ends are


def test_a_stall_is_sent_signed_naming_the_replica(store: SqlStore) -> None:
    with Receiver([]) as receiver:
        alert_book(store).add_hook("A", receiver.url, ["stalled"], SECRET, None)
        exp = fill.experiment(store, name="ddp", project="A", status=ExperimentStatus.RUNNING)
        store.notice(exp.id, "stalled", "worker-1", NOTICE)
        deliverer = Deliverer(
            outbox(store),
            "https://phalanx.example/",
            Retry(attempts=3, backoff=1),
            ManualClock(2e9),
            guard=LOOPBACK,
        )
        assert deliverer.run_once() == 1
        (got,) = receiver.wait_for(1)
    assert got.signed_by(SECRET) and got.headers[EVENT.lower()] == "experiment.stalled"
    doc = json.loads(got.body)
    assert doc["url"] == f"https://phalanx.example/experiments/{exp.id}"
    assert doc["text"] == f"phalanx: experiment ddp ({exp.id}) of A stalled: {WHAT}"


def test_a_hook_may_ask_for_stalls_either_way() -> None:
    assert check_hook("A", "https://hooks.example/x", ["experiment.stalled", "stalled"], None) == ("stalled",)


def test_the_other_notices_leave_the_reason_and_an_unknown_one_is_refused(store: SqlStore) -> None:
    book = alert_book(store)
    hook = book.add_hook("A", "http://127.0.0.1:9/a", ["experiment.straggling", "waiting"], SECRET, None)
    assert hook.events == ("straggling", "waiting")  # kept as the experiment's ends are
    exp = fill.experiment(store, name="ddp", project="A", status=ExperimentStatus.RUNNING)
    store.notice(exp.id, "straggling", "worker-1", "straggling: worker-1 makes 1 steps/s")
    store.notice(exp.id, "waiting", None, "waiting: queued for 31 min: project A's quota")
    assert store.get_experiment(exp.id).reason is None
    told = sorted(
        (doc["event"], doc["experiment_id"])
        for doc in (json.loads(d.payload) for d in outbox(store).claim_due(2e9, 60))
    )
    assert told == [("experiment.straggling", exp.id), ("experiment.waiting", exp.id)]
    with pytest.raises(UsageError, match="notice 'bored'"):
        store.notice(exp.id, "bored", None, "bored: nothing happens")
