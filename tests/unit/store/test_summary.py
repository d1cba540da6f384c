"""The multi-resolution scalar summary: exact whatever order batches arrive in, and a chart view
that reads a bounded number of points but keeps every spike, the first and the last point."""

from __future__ import annotations

import random

from sqlalchemy import text

from phalanx.domain import Event, EventKind, Replica, Role
from phalanx.store.sql import SqlStore
from phalanx.store.summary_writes import BASE, LEVELS, width


def _experiment(store: SqlStore) -> str:
    e = store.create_experiment(
        name="big", project="p", replicas=[Replica("", "master", Role.MASTER, 0, 0)], backend="local"
    )
    return e.id


def _write(store: SqlStore, exp: str, points: list[tuple[int, float]], stream: str) -> None:
    data = {"points": [["loss", "a", step, value, 1000.0 + step] for step, value in points]}
    store.write_events([Event(exp, EventKind.SCALAR, data, stream=stream, seq=0)])


def test_the_summary_is_exact_at_every_level_whatever_the_batch_order(store: SqlStore) -> None:
    exp = _experiment(store)
    rng = random.Random(7)
    steps = list(range(-40, 9000, 3))
    values = {s: rng.uniform(-5, 5) for s in steps}
    batches = [steps[i : i + 997] for i in range(0, len(steps), 997)]
    rng.shuffle(batches)
    for i, batch in enumerate(batches):
        _write(store, exp, [(s, values[s]) for s in batch], f"s{i}")
    with store.engine.connect() as conn:
        for level in LEVELS:
            rows = conn.execute(
                text(
                    "SELECT bucket, n, min_value, max_value, first_step, last_step, last_value, "
                    "min_step, max_step FROM scalar_summary WHERE level = :level ORDER BY bucket"
                ),
                {"level": level},
            ).all()
            expected: dict[int, list[int]] = {}
            for s in steps:
                expected.setdefault(s // width(level), []).append(s)
            assert [r[0] for r in rows] == sorted(expected), level
            for bucket, n, mn, mx, fs, ls, lv, mns, mxs in rows:
                members = expected[bucket]
                assert n == len(members)
                assert mn == min(values[s] for s in members) and values[mns] == mn
                assert mx == max(values[s] for s in members) and values[mxs] == mx
                assert (fs, ls, lv) == (members[0], members[-1], values[members[-1]])


def test_a_view_of_a_long_series_is_bounded_and_keeps_spikes_first_and_last(store: SqlStore) -> None:
    exp = _experiment(store)
    n = 100_000
    values = [1.0 / (i + 1) for i in range(n)]
    values[54_321] = 77.0
    values[77_777] = -9.0
    _write(store, exp, list(enumerate(values)), "big")
    view = store.metric_view(exp, "loss", max_points=1000)["a"]
    s = view.series
    assert view.count == n and view.downsampled
    assert 300 <= len(s.steps) <= 1000
    assert s.steps == sorted(set(s.steps))
    assert (s.steps[0], s.values[0]) == (0, 1.0)
    assert (s.steps[-1], s.values[-1]) == (n - 1, values[-1])
    assert s.values[s.steps.index(54_321)] == 77.0 and s.values[s.steps.index(77_777)] == -9.0
    # a 1% window: only that window, in full detail
    zoom = store.metric_view(exp, "loss", x_min=50_000, x_max=50_999, max_points=2000)["a"].series
    assert zoom.steps == list(range(50_000, 51_000))
    # a 10% window, summarised: every point inside it
    wide = store.metric_view(exp, "loss", x_min=50_000, x_max=59_999, max_points=1000)["a"].series
    assert wide.steps[0] >= 50_000 - BASE**2 and wide.steps[-1] <= 60_000 + BASE**2
    assert 77.0 in wide.values and len(wide.steps) <= 1000
    # the same along wall time
    timed = store.metric_view(
        exp, "loss", x="time", x_min=1000.0 + 50_000, x_max=1000.0 + 50_999, max_points=2000
    )["a"]
    assert timed.series.steps == list(range(50_000, 51_000))


def test_deleting_an_experiment_deletes_its_summary(store: SqlStore) -> None:
    exp = _experiment(store)
    _write(store, exp, [(i, float(i)) for i in range(100)], "x")
    store.delete_experiment(exp)
    with store.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM scalar_summary")).scalar() == 0
