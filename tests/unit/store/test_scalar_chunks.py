"""Points live in compressed chunks (store.sql.points): every read gives what one row per point gave
(order by step then arrival, repeats of a step kept, NaN and -0.0 as reported), a store of the
previous schema moves its points over on upgrade, and a point costs at most 20 bytes in SQLite."""

from __future__ import annotations

import math
import random
from array import array
from pathlib import Path

import pytest
from sqlalchemy import text

from phalanx.domain import Event, EventKind
from phalanx.spool import encode_points
from phalanx.store import chunks
from phalanx.store.migrations import HEAD
from phalanx.store.sql import SqlStore
from phalanx.store.sql.engine import make_engine, writer
from tests.unit.store.test_event_keys import _migrate, _url

Point = tuple[str, str, int, float, float]


def _scalar(exp: str, stream: str, seq: int, pts: list[Point], replica: str = "master") -> Event:
    return Event(exp, EventKind.SCALAR, encode_points(pts), replica=replica, stream=stream, seq=seq, time=1.0)


def _same(a: list[float], b: list[float]) -> bool:
    """Equal values, NaN equal to NaN and -0.0 told from 0.0 (what was reported comes back)."""
    return len(a) == len(b) and all(
        (math.isnan(x) and math.isnan(y)) or (x == y and math.copysign(1, x) == math.copysign(1, y))
        for x, y in zip(a, b, strict=True)
    )


def test_the_codec_keeps_every_value_as_reported() -> None:
    steps = [0, -5, 2**63 - 1, -(2**63), 7, 7]
    values = [math.nan, -0.0, math.inf, -math.inf, 1e-310, 0.1 + 0.2]
    times = [1.7e9 + 0.123456789, 0.0, -1.0, 5e-324, 1e308, 3.0]
    got = chunks.decode(chunks.encode(steps, values, times), len(steps))
    assert list(got[0]) == steps
    assert _same(list(got[1]), values)
    assert list(got[2]) == times
    with pytest.raises(ValueError, match="not the"):
        chunks.decode(chunks.encode(steps, values, times), len(steps) + 1)


def test_the_summary_taken_a_bucket_at_a_time_equals_the_one_taken_point_by_point() -> None:
    """Ingest aggregates ordered columns by slices of a bucket: ties (equal values, repeated steps),
    steps one apart, pieces of one series splitting a bucket, and negative steps give what the
    per-point rule gives."""
    from phalanx.store import summary_writes as summary

    rng = random.Random(11)
    for _ in range(100):
        if rng.random() < 0.3:  # a loop's steps, one apart (bucket boundaries by arithmetic)
            start = rng.randrange(-100, 100)
            steps = list(range(start, start + rng.randrange(1, 300)))
        else:
            steps = sorted(rng.randrange(-100, 400) for _ in range(rng.randrange(1, 300)))
        values = [float(rng.randrange(5)) for _ in steps]  # many equal values: which step is the min
        times = [rng.random() for _ in steps]
        if rng.random() < 0.5:  # a clock that went forward (its own faster rule), ties and all
            times.sort()
        cut = rng.randrange(len(steps) + 1)
        pieces = [(1, steps[:cut], values[:cut], times[:cut]), (1, steps[cut:], values[cut:], times[cut:])]
        slow: dict[int, list[object]] = {}
        for piece in pieces:
            summary._by_point(slow, *piece[1:])
        want = {1: [(1, bucket, *fields) for bucket, fields in sorted(slow.items())]}
        assert summary.aggregate(pieces) == want
        # as ingest hands them over: columns decoded from a record
        assert summary.aggregate([(1, *map(array, "qdd", piece[1:])) for piece in pieces]) == want


def test_reads_order_by_step_then_arrival_across_small_and_big_batches(store: SqlStore) -> None:
    """Many tiny batches (a live run) join the series' last chunk; repeats of a step keep their
    arrival order; writers interleave; the full read, a window, the last points and a chart's
    raw view all agree with the reference (the points sorted stably by step)."""
    exp = store.create_experiment(name="order", project="p").id
    rng = random.Random(7)
    sent: list[tuple[int, float, float]] = []
    for batch in range(60):
        replica = "master" if batch % 7 else "worker-0"
        size = 1 if batch < 40 else rng.choice([3, 500, 5000])
        pts = []
        for _ in range(size):
            step = rng.randrange(0, 3000)  # out of order, with repeats
            value = rng.choice([rng.random(), math.nan, -0.0])
            pts.append(("loss", "all", step, value, 1000.0 + len(sent) + len(pts)))
        store.write_events([_scalar(exp, f"s-{replica}", batch, pts, replica=replica)])
        if batch == 39:  # the 40 one-point batches: a chunk per run of one writer, not 40 rows
            with store.engine.connect() as conn:
                assert conn.execute(text("SELECT count(*) FROM scalar_chunks")).scalar_one() == 12
        sent += [(p[2], p[3], p[4]) for p in pts]
    want = sorted(sent, key=lambda p: p[0])  # stable: arrival order within a step
    got = store.metrics(exp)["loss"]["all"]
    assert got.steps == [p[0] for p in want]
    assert _same(got.values, [p[1] for p in want])
    assert got.times == [p[2] for p in want]
    window = [p for p in want if 1000 <= p[0] <= 1100]
    view = store.metric_view(exp, "loss", x_min=1000, x_max=1100, max_points=100_000)["all"]
    assert view.series.steps == [p[0] for p in window]
    assert view.series.times == [p[2] for p in window]
    assert view.count == len(sent)
    last = store.last_points(exp, "loss", 50)["all"]
    assert last.steps == [p[0] for p in want[-50:]]


def test_a_point_costs_at_most_20_bytes_in_sqlite(tmp_path: Path) -> None:
    """The issue's target, on a realistic series: a noisy decaying loss, steps in order, times a
    few milliseconds apart, ingested in batches as the ingester makes them (its summary included)."""
    store = SqlStore(f"sqlite:///{tmp_path / 'size.db'}")
    exp = store.create_experiment(name="size", project="p").id
    rng = random.Random(3)
    n, per = 200_000, 20_000
    for seq, start in enumerate(range(0, n, per)):
        pts = [
            ("loss", "train", i, 2.0 * math.exp(-i / 50_000) + rng.gauss(0, 0.05), 1.7e9 + i * 0.004)
            for i in range(start, start + per)
        ]
        store.write_events([_scalar(exp, "s", seq, pts)])
    store.compact()
    with store.engine.connect() as conn:
        pages = conn.exec_driver_sql("PRAGMA page_count").scalar_one()
        size = conn.exec_driver_sql("PRAGMA page_size").scalar_one()
        empty = conn.exec_driver_sql("SELECT count(*) FROM sqlite_master").scalar_one()  # a page per table
    store.close()
    assert (pages - empty) * size / n <= 20


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_a_store_with_points_of_revision_0010_moves_them_and_reads_the_same(
    kind: str, tmp_path: Path
) -> None:
    url = _url(kind, tmp_path)
    _migrate(url, "0010_teams_accounts")
    engine = make_engine(url)
    # two replicas into one series (a repeated step, a NaN SQLite kept as NULL), a second series
    rows = [
        (1, 0, 1.0, 10.0, "master", 0),
        (1, 0, 2.0, 11.0, "worker-0", 1),
        (1, 1, None, 12.0, "master", 0),
        (1, 0, 3.0, 13.0, "master", 0),
        (2, 5, 0.5, 14.0, "master", 0),
        *((1, s, s / 10, 100.0 + s, "worker-0", 1) for s in range(2, 25_000)),  # more than one read
    ]
    with writer(engine).begin() as conn:
        conn.execute(
            text(
                "INSERT INTO experiments (id, name, project, status, tags, topology, plan, created_at) "
                "VALUES ('old000000001', 'old', 'p', 'running', '[]', '{}', '{}', 1.0)"
            )
        )
        conn.execute(
            text(
                "INSERT INTO series (id, experiment_id, title, series) "
                "VALUES (1, 'old000000001', 'loss', 'a'), (2, 'old000000001', 'acc', 'b')"
            )
        )
        conn.execute(
            text(
                "INSERT INTO scalars (series_id, step, value, time, replica, rank) "
                "VALUES (:sid, :step, :value, :time, :replica, :rank)"
            ),
            [dict(zip(("sid", "step", "value", "time", "replica", "rank"), r, strict=True)) for r in rows],
        )
    engine.dispose()

    store = SqlStore(url)  # opening it upgrades it
    try:
        with store.engine.connect() as conn:
            assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == HEAD
            tables = set(store.engine.dialect.get_table_names(conn))
        assert "scalars" not in tables
        got = store.metrics("old000000001")
        loss = got["loss"]["a"]
        # step 0: the three points in the order they were stored; then step 1 (its NaN), 2, 3, ...
        assert loss.steps[:4] == [0, 0, 0, 1]
        assert _same(loss.values[:4], [1.0, 2.0, 3.0, math.nan])
        assert loss.times[:4] == [10.0, 11.0, 13.0, 12.0]
        assert loss.steps[4:] == list(range(2, 25_000))
        assert loss.values[4:] == [s / 10 for s in range(2, 25_000)]
        assert got["acc"]["b"].steps == [5]
        assert store.series_replicas("old000000001", "loss") == {"a": "worker-0"}
        # the points keep arriving after the upgrade, after the moved ones
        store.write_events([_scalar("old000000001", "new", 0, [("loss", "a", 0, 4.0, 20.0)])])
        assert store.metrics("old000000001", "loss")["loss"]["a"].values[:4] == [1.0, 2.0, 3.0, 4.0]
        with store.engine.connect() as conn:
            stored = conn.execute(text("SELECT sum(n) FROM scalar_chunks")).scalar_one()
        assert stored == len(rows) + 1
    finally:
        store.close()


def test_downgrading_below_0011_gives_the_points_back_as_rows(tmp_path: Path) -> None:
    from alembic import command

    from phalanx.store.sql.engine import alembic_config

    url = f"sqlite:///{tmp_path / 'down.db'}"
    store = SqlStore(url)
    exp = store.create_experiment(name="down", project="p").id
    store.write_events([_scalar(exp, "s", 0, [("loss", "a", 3, math.nan, 1.0), ("loss", "a", 1, 0.5, 2.0)])])
    store.close()
    engine = make_engine(url)
    cfg = alembic_config()
    with writer(engine).begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0010_teams_accounts")
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT step, value, time, replica FROM scalars ORDER BY id")).all()
    engine.dispose()
    assert [tuple(r) for r in rows] == [(3, None, 1.0, "master"), (1, 0.5, 2.0, "master")]
