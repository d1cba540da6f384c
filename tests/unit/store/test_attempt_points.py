"""Steps are idempotent per attempt (issue 18): a requeued or restarted run that reports its steps
again leaves one point per step, the later attempt's, on SQLite and on PostgreSQL; the chart summary
counts what is stored, not what was replaced."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import text

from phalanx.domain import Event, EventKind, ExperimentStatus
from phalanx.ingest import Ingester
from phalanx.spool import SpoolWriter, encode_points
from phalanx.store.spool_records import record_to_event
from phalanx.store.sql import SqlStore, points


def _points(
    exp: str, stream: str, seq: int, steps: range, value: float, attempt: int | None, series: str = "a"
) -> Event:
    data = {"points": [["loss", series, s, value + s, 1000.0 + s] for s in steps]}
    return Event(exp, EventKind.SCALAR, data, stream=stream, seq=seq, attempt=attempt)


def _exp(store: SqlStore) -> str:
    return store.create_experiment(name="requeue", project="p").id


def _summary_count(store: SqlStore, exp: str) -> int:
    with store.engine.connect() as conn:
        return int(
            conn.execute(
                text(
                    "SELECT coalesce(sum(n), 0) FROM scalar_summary s JOIN series r ON r.id = s.series_id"
                    " WHERE r.experiment_id = :e AND s.level = 1"
                ),
                {"e": exp},
            ).scalar_one()
        )


def test_a_requeued_run_that_reports_every_step_again_leaves_one_point_per_step(store: SqlStore) -> None:
    exp = _exp(store)
    store.write_events([_points(exp, "first", 0, range(0, 20), 0.0, 0)])
    store.write_events([_points(exp, "first", 1, range(20, 26), 0.0, 0)])  # killed at step 25
    store.write_events([_points(exp, "second", 0, range(0, 20), 100.0, 1)])
    store.write_events([_points(exp, "second", 1, range(20, 40), 100.0, 1)])
    series = store.metrics(exp)["loss"]["a"]
    assert series.steps == list(range(40))
    assert series.values == [100.0 + s for s in range(40)]  # the later attempt's values
    assert _summary_count(store, exp) == 40
    view = store.metric_view(exp, "loss")["a"]
    assert view.count == 40 and view.series.values[-1] == 139.0


def test_a_run_resumed_from_a_checkpoint_keeps_the_steps_before_it_and_drops_the_stale_tail(
    store: SqlStore,
) -> None:
    exp = _exp(store)
    store.write_events([_points(exp, "first", 0, range(0, 30), 0.0, None)])  # attempt 0, no number
    store.write_events([_points(exp, "second", 0, range(20, 24), 100.0, 1)])  # checkpoint at 20
    series = store.metrics(exp)["loss"]["a"]
    assert series.steps == list(range(24))  # 24..29 of the first attempt are gone: no stale tail
    assert series.values == [float(s) for s in range(20)] + [100.0 + s for s in range(20, 24)]
    assert _summary_count(store, exp) == 24


def test_points_of_an_older_attempt_arriving_late_only_fill_steps_before_the_newer_one(
    store: SqlStore,
) -> None:
    exp = _exp(store)
    store.write_events([_points(exp, "first", 0, range(0, 10), 0.0, 0)])
    store.write_events([_points(exp, "second", 0, range(10, 15), 100.0, 1)])
    store.write_events([_points(exp, "first", 1, range(10, 14), 0.0, 0)])  # late: replaced already
    series = store.metrics(exp)["loss"]["a"]
    assert series.steps == list(range(15))
    assert series.values[10:] == [100.0 + s for s in range(10, 15)]
    assert _summary_count(store, exp) == 15


def test_another_rank_of_the_new_attempt_resuming_earlier_replaces_from_its_first_step(
    store: SqlStore,
) -> None:
    exp = _exp(store)
    store.write_events([_points(exp, "first", 0, range(0, 10), 0.0, 0)])
    store.write_events([_points(exp, "second-r0", 0, range(6, 8), 100.0, 1)])
    store.write_events([_points(exp, "second-r1", 0, range(4, 6), 200.0, 1)])
    series = store.metrics(exp)["loss"]["a"]
    assert series.steps == list(range(8))
    assert series.values == [0.0, 1.0, 2.0, 3.0, 204.0, 205.0, 106.0, 107.0]


def test_within_one_attempt_and_without_attempts_points_are_appended_as_before(store: SqlStore) -> None:
    exp = _exp(store)
    store.write_events([_points(exp, "s", 0, range(0, 5), 0.0, 2)])
    store.write_events([_points(exp, "s", 1, range(0, 5), 10.0, 2)])  # the same attempt repeats
    store.write_events([_points(exp, "t", 0, range(0, 3), 0.0, None, series="b")])
    store.write_events([_points(exp, "u", 0, range(0, 3), 0.0, None, series="b")])
    assert store.write_events([_points(exp, "s", 1, range(0, 5), 10.0, 2)]) == 0  # exactly once
    metrics = store.metrics(exp)["loss"]
    assert len(metrics["a"].steps) == 10 and len(metrics["b"].steps) == 6
    assert _summary_count(store, exp) == 16


def test_other_series_and_experiments_are_untouched(store: SqlStore) -> None:
    exp, other = _exp(store), _exp(store)
    store.write_events([_points(exp, "x", 0, range(0, 10), 0.0, 0, series="a")])
    store.write_events([_points(exp, "x", 1, range(0, 10), 0.0, 0, series="b")])
    store.write_events([_points(other, "y", 0, range(0, 10), 0.0, 0, series="a")])
    store.write_events([_points(exp, "z", 0, range(5, 7), 100.0, 1, series="a")])
    assert store.metrics(exp)["loss"]["a"].steps == list(range(7))
    assert store.metrics(exp)["loss"]["b"].steps == list(range(10))
    assert store.metrics(other)["loss"]["a"].steps == list(range(10))


def test_the_attempt_travels_from_the_spool_writer_through_ingest(store: SqlStore, tmp_path: Path) -> None:
    exp = _exp(store)
    spool = tmp_path / "spool" / exp
    for attempt, value in ((0, 0.0), (1, 100.0)):
        with SpoolWriter(spool, experiment_id=exp, attempt=attempt) as writer:
            points = [("loss", "a", s, value + s, 1000.0 + s) for s in range(attempt * 5, 12)]
            writer.write("scalar", encode_points(points))
        Ingester(store, None, spool).run_once()
    series = store.metrics(exp)["loss"]["a"]
    assert series.steps == list(range(12))
    assert series.values == [float(s) for s in range(5)] + [100.0 + s for s in range(5, 12)]


def test_a_record_names_its_attempt_and_an_old_record_has_none() -> None:
    data = {"title": "t", "series": "s", "step": 1, "value": 2}
    base = {"kind": "scalar", "experiment_id": "e", "data": data}
    assert record_to_event({**base, "attempt": 3}).attempt == 3
    assert record_to_event(base).attempt is None


def _by_replica(store: SqlStore, exp: str) -> dict[str, list[tuple[int, float]]]:
    with store.engine.connect() as conn:
        rows = points.by_writer(conn, exp)
    out: dict[str, list[tuple[int, float]]] = {}
    for replica, step, value in rows:
        out.setdefault(replica, []).append((int(step), float(value)))
    return out


def test_a_replica_restarted_alone_replaces_only_its_own_points_of_a_shared_series(store: SqlStore) -> None:
    """Kubernetes restarts each pod on its own: the worker is at its second start (attempt 1) while
    the master still runs its first (attempt 0), both reporting `loss/a`. The worker's re-reported
    steps replace its own; the master's points, before and after, all stay (per series, the
    worker's first point deleted the master's and the master's later ones were dropped as late)."""
    exp = _exp(store)

    def points(stream: str, seq: int, replica: str, steps: range, value: float, attempt: int) -> Event:
        data = _points(exp, stream, seq, steps, value, attempt).data
        return Event(exp, EventKind.SCALAR, data, replica=replica, stream=stream, seq=seq, attempt=attempt)

    store.write_events([points("m", 0, "master", range(0, 10), 0.0, 0)])
    store.write_events([points("w0", 0, "worker-0", range(0, 6), 10.0, 0)])  # the worker's pod fails
    store.write_events([points("w1", 0, "worker-0", range(0, 10), 20.0, 1)])  # ...and starts again
    store.write_events([points("m", 1, "master", range(10, 15), 0.0, 0)])  # the master goes on
    stored = _by_replica(store, exp)
    assert stored["master"] == [(s, float(s)) for s in range(15)]
    assert stored["worker-0"] == [(s, 20.0 + s) for s in range(10)]
    assert _summary_count(store, exp) == 25


def test_each_start_of_a_replica_gets_a_higher_attempt_number(store: SqlStore) -> None:
    exp = _exp(store)
    assert [store.next_attempt(exp, "master") for _ in range(3)] == [0, 1, 2]
    assert store.next_attempt(exp, "worker-0") == 0  # counted per replica
    assert store.next_attempt(exp, "worker-0", at_least=5) == 5  # a `phalanx resume` gave the group 5
    assert store.next_attempt(exp, "worker-0", at_least=5) == 6  # a restart in that resumed group
    assert store.next_attempt(exp, "master", at_least=1) == 3  # never lower than an earlier start's
    store.update_experiment(exp, status=ExperimentStatus.FAILED)
    store.delete_experiment(exp)
    with store.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM replica_starts")).scalar_one() == 0


def test_a_text_reported_again_at_a_step_by_a_later_attempt_replaces_the_earlier_one(store: SqlStore) -> None:
    exp = _exp(store)

    def text_event(stream: str, seq: int, step: int | None, body: str, attempt: int | None) -> Event:
        data = {"title": "samples", "text": body, "step": step}
        return Event(exp, EventKind.TEXT, data, stream=stream, seq=seq, attempt=attempt)

    store.write_events([text_event("a", i, step, f"first {step}", 0) for i, step in enumerate((0, 1, 2))])
    store.write_events([text_event("b", 0, 1, "second 1", 1), text_event("b", 1, 1, "second 1 again", 1)])
    store.write_events([text_event("a", 3, 1, "first 1, late", 0)])  # an older attempt's, late
    store.write_events([text_event("c", 0, None, "no step", 2), text_event("d", 0, 5, "no attempt", None)])
    texts = sorted((t["step"] is None, t["step"] or 0, t["text"]) for t in store.texts(exp))
    assert texts == [
        (False, 0, "first 0"),
        (False, 1, "second 1"),
        (False, 1, "second 1 again"),  # within one attempt, both are kept
        (False, 2, "first 2"),  # not reported again: kept
        (False, 5, "no attempt"),
        (True, 0, "no step"),
    ]
