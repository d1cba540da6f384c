"""A group's end (succeeded, failed or stopped) queues one ``group.finished`` delivery per hook of its
project that asked for it, in the transaction that records the end, never twice for one end, with
the group's best trial as `phalanx group get` shows it; the deliverer sends it signed with the
group's address and a Slack line naming the best trial. Migration 0018 keeps the deliveries of
before and a downgrade drops only the groups'."""

from __future__ import annotations

import json
from typing import Any

from alembic import command
from sqlalchemy import text

from phalanx.domain import ExperimentStatus, Group, GroupStatus, Trial, TrialState
from phalanx.server.alerting import EVENT, Deliverer, Retry
from phalanx.store.alert_records import Delivery
from phalanx.store.alerts import alert_book, outbox
from phalanx.store.sql import SqlStore
from phalanx.store.sql.engine import alembic_config
from tests.support.clock import ManualClock
from tests.support.webhooks import LOOPBACK, Receiver
from tests.unit.server import fill

SECRET = "0123456789abcdef-secret"
# trial number -> (state, loss); minimize: trial 2 is the best (trial 1's lower loss was pruned)
TRIALS = {
    0: (TrialState.DONE, 0.5),
    1: (TrialState.PRUNED, 0.1),
    2: (TrialState.DONE, 0.25),
    3: (TrialState.FAILED, None),
}


def _group(store: SqlStore, project: str = "A") -> Group:
    """A running random search of ``project`` minimizing loss, its trials recorded and ended as a
    controller records them (each trial's end before the group's)."""
    group = store.create_group(
        name="lr-search",
        project=project,
        search="random",
        planned=4,
        concurrency=2,
        metric="loss",
        optimization="minimize",
        spec_text="version: 1\n",
        source_file=None,
        workdir="/tmp",
        options={},
    )
    store.update_group(group.id, status=GroupStatus.RUNNING, controller_pid=4242)
    for number, (state, loss) in TRIALS.items():
        exp = fill.experiment(
            store, name=f"lr-search-{number}", project=project, status=ExperimentStatus.RUNNING
        )
        store.add_trial(
            Trial(group.id, number, exp.id, {"lr": 10.0**-number, "depth": number}, TrialState.LAUNCHING)
        )
        store.link_experiment(exp.id, group.id)
        store.update_trial(group.id, number, state=state, value=loss, step=10 * number, finished_at=5.0)
    return store.get_group(group.id)


def _end(
    store: SqlStore, group_id: str, status: GroupStatus = GroupStatus.SUCCEEDED, reason: str | None = None
) -> None:
    store.update_group(group_id, status=status, reason=reason, finished_at=9.0, controller_pid=None)


def _payload(store: SqlStore) -> dict[str, Any]:
    (due,) = outbox(store).claim_due(now=2e9, lease=60)
    assert due.event == "group.finished"
    doc: dict[str, Any] = json.loads(due.payload)
    return doc


def test_a_groups_end_is_queued_once_for_each_hook_that_asked_for_it(store: SqlStore) -> None:
    book = alert_book(store)
    told = [book.add_hook("A", f"http://127.0.0.1:9/{n}", ["group.finished"], SECRET, "ada") for n in "ab"]
    both = book.add_hook("A", "http://127.0.0.1:9/c", ["failed", "group.finished"], SECRET, "ada")
    experiments_only = book.add_hook(
        "A", "http://127.0.0.1:9/d", ["failed", "succeeded", "stopped"], SECRET, None
    )
    elsewhere = book.add_hook("B", "http://127.0.0.1:9/e", ["group.finished"], SECRET, None)
    group = _group(store)
    store.update_group(group.id, stop_requested=True)  # no end: nothing queued
    assert outbox(store).claim_due(now=2e9, lease=60) == []

    _end(store, group.id)
    _end(store, group.id, reason="written again")  # an end written again: no new event
    _end(store, group.id, GroupStatus.STOPPED)  # nor another end over it
    store.update_group(group.id, controller_pid=None)

    for hook in [*told, both]:
        (delivery,) = book.deliveries(hook.id)
        assert (delivery.group_id, delivery.experiment_id) == (group.id, None)  # about the group
        assert (delivery.event, delivery.state) == ("group.finished", "pending")
    assert book.deliveries(experiments_only.id) == []  # the trials' experiments never ended here
    assert book.deliveries(elsewhere.id) == []
    assert len(outbox(store).claim_due(now=2e9, lease=60)) == 3


def test_the_payload_holds_the_best_trial_as_group_get_shows_it(store: SqlStore) -> None:
    alert_book(store).add_hook("A", "http://127.0.0.1:9/a", ["group.finished"], SECRET, None)
    group = _group(store)
    _end(store, group.id)
    payload = _payload(store)
    shown = store.group_view(group.id)

    best = payload["best"]
    assert best == shown["best"] | {"metric": "loss"}  # `phalanx group get`'s best, with its metric
    assert (best["number"], best["value"], best["metric"]) == (2, 0.25, "loss")  # the pruned 0.1 is not
    assert best["experiment_id"] == store.list_trials(group.id)[2].experiment_id
    assert best["params"] == {"lr": 0.01, "depth": 2}
    assert payload["counts"] == shown["counts"]
    assert {k: n for k, n in payload["counts"].items() if n} == {"done": 2, "pruned": 1, "failed": 1}
    assert payload | {"best": None, "counts": None} == {
        "event": "group.finished",
        "project": "A",
        "group_id": group.id,
        "name": "lr-search",
        "status": "succeeded",
        "reason": None,
        "search": "random",
        "planned": 4,
        "finished_at": 9.0,
        "best": None,
        "counts": None,
    }


def test_a_stopped_group_is_sent_signed_with_its_address_and_best_trial(store: SqlStore) -> None:
    clock = ManualClock(2e9)
    with Receiver([500]) as receiver:
        hook = alert_book(store).add_hook("A", receiver.url, ["group.finished"], SECRET, None)
        group = _group(store)
        _end(store, group.id, GroupStatus.STOPPED, "stopped by phalanx group stop")
        deliverer = Deliverer(
            outbox(store), "https://phalanx.example/", Retry(attempts=3, backoff=1), clock, guard=LOOPBACK
        )
        assert deliverer.run_once() == 1  # 500
        clock.now += 1
        assert deliverer.run_once() == 1  # 200
        got = receiver.wait_for(2)
    assert all(g.signed_by(SECRET) for g in got) and got[-1].headers[EVENT.lower()] == "group.finished"
    body = json.loads(got[-1].body)
    assert (body["status"], body["reason"]) == ("stopped", "stopped by phalanx group stop")
    assert body["url"] == f"https://phalanx.example/groups/{group.id}"
    best_id = body["best"]["experiment_id"]
    assert body["text"] == (
        f"phalanx: group lr-search ({group.id}) of A stopped: stopped by phalanx group stop;"
        f" best: trial 2 ({best_id}) loss 0.25 (depth=2, lr=0.01)"  # params by name
    )
    (delivery,) = alert_book(store).deliveries(hook.id)
    assert delivery.state == "delivered" and [a.status_code for a in delivery.attempts] == [500, 200]
    assert Delivery.from_json(json.loads(json.dumps(delivery.to_json()))) == delivery  # as the API carries it


def test_a_group_without_a_best_trial_says_none_and_a_resumed_group_that_ends_again_is_new(
    store: SqlStore,
) -> None:
    hook = alert_book(store).add_hook("A", "http://127.0.0.1:9/a", ["group.finished"], SECRET, None)
    group = store.create_group(
        name="grid",
        project="A",
        search="grid",
        planned=2,
        concurrency=1,
        metric=None,
        optimization=None,
        spec_text="version: 1\n",
        source_file=None,
        workdir=None,
        options={},
    )
    _end(store, group.id, GroupStatus.FAILED, "its launch order was lost")
    payload = _payload(store)
    assert (payload["best"], payload["status"], payload["reason"]) == (
        None,
        "failed",
        "its launch order was lost",
    )
    assert sum(payload["counts"].values()) == 0
    store.update_group(group.id, status=GroupStatus.RUNNING)  # resumed
    _end(store, group.id)
    assert [d.event for d in alert_book(store).deliveries(hook.id)] == ["group.finished"] * 2


def test_hooks_name_events_as_receivers_get_them_and_keep_the_old_names(store: SqlStore) -> None:
    book = alert_book(store)
    hook = book.add_hook(
        "A", "http://127.0.0.1:9/a", ["experiment.failed", "group.finished", "failed"], SECRET, None
    )
    assert hook.events == ("failed", "group.finished")  # as hooks kept an experiment's ends before
    exp = fill.experiment(store, project="A", status=ExperimentStatus.RUNNING)
    store.update_experiment(exp.id, status=ExperimentStatus.FAILED, reason="boom")
    _end(store, _group(store).id)
    assert sorted(d.event for d in book.deliveries(hook.id)) == ["experiment.failed", "group.finished"]


def test_migration_0018_keeps_the_deliveries_of_before_and_its_downgrade_drops_the_groups(
    store: SqlStore,
) -> None:
    book = alert_book(store)
    hook = book.add_hook("A", "http://127.0.0.1:9/a", ["failed", "group.finished"], SECRET, None)
    exp = fill.experiment(store, project="A", status=ExperimentStatus.RUNNING)
    store.update_experiment(exp.id, status=ExperimentStatus.FAILED)
    _end(store, _group(store).id)
    for due in outbox(store).claim_due(now=2e9, lease=60):
        outbox(store).record_attempt(due.id, 2e9, 500, "the receiver answered 500", 3e9)
    cfg = alembic_config()
    with store.engine.begin() as conn:  # a store of 0017, then brought to the head again
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0017_alert_hooks_i43")
        kept = conn.execute(text("SELECT experiment_id, event FROM alert_deliveries")).all()
        tries = conn.execute(text("SELECT count(*) FROM alert_attempts")).scalar_one()
        command.upgrade(cfg, "head")
    assert [tuple(r) for r in kept] == [(exp.id, "experiment.failed")] and tries == 1
    (delivery,) = book.deliveries(hook.id)
    assert (delivery.experiment_id, delivery.group_id, len(delivery.attempts)) == (exp.id, None, 1)
