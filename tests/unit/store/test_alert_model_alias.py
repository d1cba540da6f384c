"""A registered model's alias pointed at another version queues one ``model.alias`` delivery per hook
of the model's project that asked for it, in the transaction that moves it, never for an alias set
again to the version it names; the deliverer sends it signed, with the model's address and a line
naming the move. Migration 0019 keeps the deliveries of before and a downgrade drops only the
models'."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("onnxruntime")

from alembic import command
from sqlalchemy import text

from phalanx.domain import ExperimentStatus
from phalanx.errors import UsageError
from phalanx.registry.checker import check_in_process
from phalanx.registry.service import Registry
from phalanx.server.alerting import EVENT, Deliverer, Retry
from phalanx.store.alert_records import Delivery, check_hook
from phalanx.store.alerts import alert_book, outbox
from phalanx.store.sql import SqlStore
from phalanx.store.sql.engine import alembic_config
from tests.support.clock import ManualClock
from tests.support.onnx_models import random_linear, record_model
from tests.support.webhooks import LOOPBACK, Receiver
from tests.unit.server import fill

SECRET = "0123456789abcdef-secret"


def _two_versions(store: SqlStore, project: str = "A") -> Registry:
    """``digits`` versions 1 and 2, registered from two experiments of ``project``."""
    registry = Registry(store, check_in_process)
    for seed in (1, 2):
        exp = store.create_experiment(name=f"train-{seed}", project=project).id
        record_model(store, exp, "digits", random_linear(seed))
        registry.register(exp, "digits")
    return registry


def test_a_moved_alias_is_queued_once_for_each_hook_of_its_project_that_asked(store: SqlStore) -> None:
    book = alert_book(store)
    told = book.add_hook("A", "http://127.0.0.1:9/a", ["model.alias"], SECRET, "ada")
    ends_only = book.add_hook("A", "http://127.0.0.1:9/b", ["failed", "group.finished"], SECRET, None)
    elsewhere = book.add_hook("B", "http://127.0.0.1:9/c", ["model.alias"], SECRET, None)
    registry = _two_versions(store)
    assert outbox(store).claim_due(now=2e9, lease=60) == []  # registering moves no alias

    registry.set_alias("digits", "prod", 1)  # a new alias
    registry.set_alias("digits", "prod", 1)  # set again where it points: nothing
    registry.set_alias("digits", "prod", 2)  # moved

    payloads = sorted(
        (json.loads(d.payload) for d in outbox(store).claim_due(now=2e9, lease=60)),
        key=lambda p: p["version"],
    )
    assert [{k: v for k, v in p.items() if k != "moved_at"} for p in payloads] == [
        {
            "event": "model.alias",
            "project": "A",
            "model": "digits",
            "alias": "prod",
            "version": 1,
            "previous": None,
        },
        {
            "event": "model.alias",
            "project": "A",
            "model": "digits",
            "alias": "prod",
            "version": 2,
            "previous": 1,
        },
    ]
    deliveries = book.deliveries(told.id)
    assert [(d.model, d.experiment_id, d.group_id, d.about) for d in deliveries] == [
        ("digits", None, None, "model digits")
    ] * 2
    assert book.deliveries(ends_only.id) == [] and book.deliveries(elsewhere.id) == []


def test_a_moved_alias_is_sent_signed_with_the_models_address_and_what_moved(store: SqlStore) -> None:
    clock = ManualClock(2e9)
    with Receiver([500]) as receiver:
        hook = alert_book(store).add_hook("A", receiver.url, ["model.alias"], SECRET, None)
        registry = _two_versions(store)
        registry.set_alias("digits", "prod", 1)
        deliverer = Deliverer(
            outbox(store), "https://phalanx.example/", Retry(attempts=3, backoff=1), clock, guard=LOOPBACK
        )
        assert deliverer.run_once() == 1  # 500
        clock.now += 1
        assert deliverer.run_once() == 1  # 200
        registry.set_alias("digits", "prod", 2)
        assert deliverer.run_once() == 1
        got = receiver.wait_for(3)
    assert all(g.signed_by(SECRET) for g in got) and got[-1].headers[EVENT.lower()] == "model.alias"
    first, moved = json.loads(got[1].body), json.loads(got[-1].body)
    assert moved["url"] == "https://phalanx.example/models/digits"
    assert first["text"] == "phalanx: model digits of A: @prod now points at version 1"
    assert moved["text"] == "phalanx: model digits of A: @prod now points at version 2 (was version 1)"
    delivery = alert_book(store).deliveries(hook.id)[-1]
    assert delivery.state == "delivered" and [a.status_code for a in delivery.attempts] == [500, 200]
    assert Delivery.from_json(json.loads(json.dumps(delivery.to_json()))) == delivery  # as the API carries it


def test_a_hook_may_ask_for_model_alias_and_a_wrong_name_lists_it() -> None:
    assert check_hook("A", "https://hooks.example/x", ["model.alias", "failed"], None) == (
        "model.alias",
        "failed",
    )
    with pytest.raises(
        UsageError, match=r"failed,succeeded,stopped,stalled,straggling,waiting,group\.finished,model\.alias"
    ):
        check_hook("A", "https://hooks.example/x", ["model.moved"], None)


def test_migration_0019_keeps_the_deliveries_of_before_and_its_downgrade_drops_the_models(
    store: SqlStore,
) -> None:
    book = alert_book(store)
    hook = book.add_hook("A", "http://127.0.0.1:9/a", ["failed", "model.alias"], SECRET, None)
    exp = fill.experiment(store, project="A", status=ExperimentStatus.RUNNING)
    store.update_experiment(exp.id, status=ExperimentStatus.FAILED)
    _two_versions(store).set_alias("digits", "prod", 2)
    for due in outbox(store).claim_due(now=2e9, lease=60):
        outbox(store).record_attempt(due.id, 2e9, 500, "the receiver answered 500", 3e9)
    cfg = alembic_config()
    with store.engine.begin() as conn:  # a store of 0018, then brought to the head again
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0018_alert_group_finished_i43")
        kept = conn.execute(text("SELECT experiment_id, event FROM alert_deliveries")).all()
        tries = conn.execute(text("SELECT count(*) FROM alert_attempts")).scalar_one()
        command.upgrade(cfg, "head")
    assert [tuple(r) for r in kept] == [(exp.id, "experiment.failed")] and tries == 1
    (delivery,) = book.deliveries(hook.id)
    assert (delivery.experiment_id, delivery.model, len(delivery.attempts)) == (exp.id, None, 1)
