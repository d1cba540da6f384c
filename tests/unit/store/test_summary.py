"""The multi-resolution scalar summary: exact whatever order batches arrive in, and a chart view
that reads a bounded number of points but keeps every spike, the first and the last point."""

from __future__ import annotations

import math
import random

import pytest
from sqlalchemy import text

from phalanx.domain import Event, EventKind, Replica, Role
from phalanx.spool import encode_points
from phalanx.store.sql import SqlStore
from phalanx.store.sql.driver import DriverDb
from phalanx.store.summary_writes import BASE, LEVELS, refresh_upper, width


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


_SPECIAL = [math.nan, math.inf, -math.inf, -0.0]


def _summary_rows(store: SqlStore) -> list[str]:
    with store.engine.connect() as conn:
        rows = conn.execute(text("SELECT * FROM scalar_summary ORDER BY series_id, level, bucket")).all()
    return [repr(tuple(r)) for r in rows]  # repr: -0.0 and 0.0, NaN and NULL told apart


@pytest.mark.parametrize("nan_times", [False, True])
def test_the_levels_computed_at_ingest_are_those_sql_recomputes_from_level_1(
    store: SqlStore, nan_times: bool
) -> None:
    """Level 2 is computed in memory from the level-1 buckets (the batch's merged into the stored
    ones in Python, as the database's upsert merges them): recomputing every level above 1 in SQL
    from the stored level 1 must change nothing. Batches of several series and writers, loops
    continuing across batches, steps out of order and repeated, batches landing in buckets stored
    before, NaN, inf and -0.0 values; with NaN and infinite times (and -0.0 on PostgreSQL), the SQL
    recompute's own path."""
    exp = _experiment(store)
    rng = random.Random(5 + nan_times)
    keys = [("loss", "a"), ("loss", "b"), ("acc", "a")]
    loop = dict.fromkeys(keys, 0)
    seqs = {"w0": 0, "w1": 0}
    for batch in range(40):
        events = []
        for _ in range(rng.randrange(1, 4)):
            stream = rng.choice(list(seqs))
            points = []
            for _ in range(rng.choice([1, 1, 2, 5, 40, 300, 1500])):
                key = rng.choice(keys)
                if batch % 3:  # a loop's steps, now and then one repeated or going back
                    step = loop[key] = loop[key] + rng.choice([1] * 12 + [0] * 3 + [-20])
                else:
                    step = rng.randrange(-600, 6000)
                value = rng.choice(
                    [rng.gauss(0, 1)] * 7 + [float(rng.randrange(3))] * 2 + [rng.choice(_SPECIAL)]
                )
                when = 1000.0 + batch + rng.random()
                if nan_times and rng.random() < 0.02:
                    when = rng.choice([math.nan, math.inf, -math.inf])
                points.append((*key, step, value, when))
            events.append(
                Event(exp, EventKind.SCALAR, encode_points(points), stream=stream, seq=seqs[stream])
            )
            seqs[stream] += 1
        store.write_events(events)
    stored = _summary_rows(store)
    assert len(stored) > 1000
    assert _recomputed(store) == stored


def _recomputed(store: SqlStore) -> list[str]:
    """The summary rows after every level above 1 is recomputed in SQL from the stored level 1."""
    with store.engine.begin() as conn:
        spans = conn.execute(
            text("SELECT series_id, min(first_step), max(last_step) FROM scalar_summary GROUP BY series_id")
        ).all()
        refresh_upper(DriverDb(conn), {int(sid): (int(lo), int(hi)) for sid, lo, hi in spans})
    return _summary_rows(store)


def test_a_nan_max_the_backfill_stored_is_taken_as_sql_takes_it(store: SqlStore) -> None:
    """Migration 0003's backfill stored a level-1 bucket holding a NaN point with max() of its values:
    NaN on PostgreSQL, whose max() over level 1 then takes it. A later batch under the same level-2
    bucket must store the rows the SQL recompute stores (Python's max() skips a NaN after a number)."""
    exp = _experiment(store)

    def points(steps: range, seq: int) -> Event:
        data = encode_points([("loss", "a", s, float(s), 1000.0 + s) for s in steps])
        return Event(exp, EventKind.SCALAR, data, stream="w", seq=seq)

    store.write_events([points(range(32), 0)])
    with store.engine.begin() as conn:  # as the backfill left it (SQLite keeps a NaN as NULL)
        conn.execute(
            text("UPDATE scalar_summary SET max_value = :nan WHERE level = 1 AND bucket = 1"),
            {"nan": math.nan},
        )
    store.write_events([points(range(40, 50), 1)])
    stored = _summary_rows(store)
    assert _recomputed(store) == stored


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


def test_a_tie_for_the_min_and_max_across_batches_keeps_the_step_that_arrived_first(store: SqlStore) -> None:
    """A bucket's min (max) reached again by a later batch keeps the step it had (the merge keeps
    the stored one on a tie): level 2, computed in memory, marks that same step."""
    exp = _experiment(store)
    batches = [[(5, 0.0), (6, 9.0)], [(3, 0.0), (2, 9.0), (4, 1.0)]]
    for seq, batch in enumerate(batches):
        data = encode_points([("loss", "a", step, value, 1000.0 + step) for step, value in batch])
        store.write_events([Event(exp, EventKind.SCALAR, data, stream="w", seq=seq)])
    stored = _summary_rows(store)
    assert _recomputed(store) == stored
    with store.engine.connect() as conn:
        marks = conn.execute(
            text("SELECT level, min_step, max_step FROM scalar_summary ORDER BY level")
        ).all()
    assert [tuple(m) for m in marks] == [(level, 5, 6) for level in LEVELS]
