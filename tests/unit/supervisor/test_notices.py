"""What a supervisor tells while its experiment lives, besides a stall: a rank slower than the
others' median (named at two checks in a row, told once per replica and attempt, never a silent
rank: that is a stall's) and a run that has waited in the queue past its wait notice (once, with
why it waits). Each reaches the console, the project's alert hooks (an ``experiment.straggling`` or
``experiment.waiting`` delivery) and the experiment's own reason stays as it was."""

from __future__ import annotations

import json
import time

from phalanx.domain import Event, EventKind, ExperimentStatus, Replica, ReplicaState, Role
from phalanx.store.alerts import alert_book, outbox
from phalanx.store.sql import SqlStore
from phalanx.supervisor.notices import Notices, StragglerWatch, WaitWatch
from tests.support.scripted import VirtualClock

SECRET = "0123456789abcdef-secret"


def _ranks(store: SqlStore, paces: dict[str, float], silent: str | None = None) -> str:
    """An experiment whose ranks report steps at ``paces`` (steps per second) over the last 40 s;
    ``silent`` stopped 30 s ago."""
    replicas = [Replica("", n, Role.MASTER if i == 0 else Role.WORKER, i, i) for i, n in enumerate(paces)]
    exp = store.create_experiment(name="ddp", project="A", replicas=replicas, backend="local").id
    now = time.time()
    for i, (name, rate) in enumerate(paces.items()):
        end = now - 30 if name == silent else now
        points = [["loss", name, s, 1.0, end - 40 + s / rate] for s in range(int(40 * rate))]
        store.write_events([Event(exp, EventKind.SCALAR, {"points": points}, stream=f"s{i}", seq=0)])
    store.update_experiment(exp, status=ExperimentStatus.RUNNING)
    for name in paces:
        store.update_replica(exp, name, state=ReplicaState.RUNNING)
    return exp


def _told(store: SqlStore) -> list[dict[str, object]]:
    return [json.loads(d.payload) for d in outbox(store).claim_due(now=2e9, lease=60)]


def test_a_rank_slower_than_the_median_at_two_checks_is_told_once(store: SqlStore) -> None:
    alert_book(store).add_hook("A", "http://127.0.0.1:9/a", ["straggling"], SECRET, None)
    exp = _ranks(store, {"master": 2.0, "worker-0": 2.0, "worker-1": 1.0})
    said: list[str] = []
    clock = VirtualClock()
    watch = StragglerWatch(Notices(exp, lambda: store, said.append), every=60, clock=clock.monotonic)
    watch.check()  # not a minute yet: nothing read
    clock.sleep(60)
    watch.check()  # named once: maybe a blip
    assert said == []
    for _ in range(3):
        clock.sleep(60)
        watch.check()
    assert said == ["straggling: worker-1 makes 1 steps/s, 50 % below the ranks' median of 2 (series loss)"]
    (payload,) = _told(store)
    assert (payload["event"], payload["replica"], payload["status"]) == (
        "experiment.straggling",
        "worker-1",
        "straggling",
    )
    assert payload["reason"] == said[0].removeprefix("straggling: ")
    assert store.get_experiment(exp).reason is None  # a straggler is no reason: the run goes on
    watch.new_attempt()  # a restarted group's straggler is told again
    for _ in range(2):
        clock.sleep(60)
        watch.check()
    assert len(said) == 2


def test_a_silent_rank_is_a_stalls_not_a_stragglers(store: SqlStore) -> None:
    exp = _ranks(store, {"master": 1.0, "worker-0": 1.0, "worker-1": 1.0}, silent="worker-1")
    said: list[str] = []
    clock = VirtualClock()
    watch = StragglerWatch(Notices(exp, lambda: store, said.append), every=60, clock=clock.monotonic)
    for _ in range(3):
        clock.sleep(60)
        watch.check()
    assert said == []


def test_a_wait_past_its_notice_is_told_once_with_why(store: SqlStore) -> None:
    alert_book(store).add_hook("A", "http://127.0.0.1:9/a", ["experiment.waiting"], SECRET, None)
    exp = _ranks(store, {"master": 1.0})
    said: list[str] = []
    clock = VirtualClock()
    why = "project A's quota: 2 of 2 cores held"
    watch = WaitWatch(Notices(exp, lambda: store, said.append), 1800, lambda: why, clock=clock.monotonic)
    clock.sleep(1799)
    watch.check()
    assert said == []
    clock.sleep(2)
    watch.check()
    watch.check()
    assert said == [f"waiting: queued for 30 min: {why}"]
    (payload,) = _told(store)
    assert (payload["event"], payload["replica"], payload["reason"]) == (
        "experiment.waiting",
        None,
        f"queued for 30 min: {why}",
    )


def test_no_wait_notice_when_it_is_off(store: SqlStore) -> None:
    said: list[str] = []
    clock = VirtualClock()
    watch = WaitWatch(Notices("e", lambda: None, said.append), None, lambda: "", clock=clock.monotonic)
    clock.sleep(10**4)
    watch.check()
    assert said == []
