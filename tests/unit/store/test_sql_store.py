"""The SQL store's contract, on SQLite and on a real PostgreSQL server."""

from __future__ import annotations

import math
import time

import pytest

from phalanx.domain import Event, EventKind, ExperimentFilter, ExperimentStatus, Replica, ReplicaState, Role
from phalanx.errors import Conflict, NotFound, UsageError
from phalanx.store.sql import SqlStore


def _replicas() -> list[Replica]:
    return [
        Replica("", "master", Role.MASTER, 0, 0),
        Replica("", "worker-0", Role.WORKER, 0, 1),
        Replica("", "worker-1", Role.WORKER, 1, 2),
    ]


def test_created_experiment_reads_back_with_its_replicas(store: SqlStore) -> None:
    exp = store.create_experiment(
        name="mnist",
        project="examples",
        replicas=_replicas(),
        tags=["a", "b"],
        topology={"master": 1, "worker": 2},
    )
    assert len(exp.id) == 12
    got = store.get_experiment(exp.id)
    assert (got.name, got.project, got.status, got.tags) == (
        "mnist",
        "examples",
        ExperimentStatus.CREATED,
        ("a", "b"),
    )
    assert [r.name for r in store.list_replicas(exp.id)] == ["master", "worker-0", "worker-1"]


def test_creating_an_existing_id_is_a_conflict(store: SqlStore) -> None:
    store.create_experiment(name="a", project="p", experiment_id="abcdef012345")
    with pytest.raises(Conflict):
        store.create_experiment(name="b", project="p", experiment_id="abcdef012345")


def test_unique_prefix_finds_an_experiment_and_ambiguous_prefix_is_a_usage_error(store: SqlStore) -> None:
    store.create_experiment(name="a", project="p", experiment_id="abc111111111")
    store.create_experiment(name="b", project="p", experiment_id="abc222222222")
    assert store.get_experiment("abc1").name == "a"
    with pytest.raises(UsageError, match="ambiguous"):
        store.get_experiment("abc")
    with pytest.raises(NotFound):
        store.get_experiment("fff")
    with pytest.raises(NotFound):
        store.get_experiment("a%")


def test_an_id_copied_with_spaces_or_in_capitals_still_finds_the_experiment(store: SqlStore) -> None:
    store.create_experiment(name="a", project="p", experiment_id="abc111111111")
    assert store.get_experiment(" ABC1111 ").name == "a"
    assert store.resolve_id("Abc111111111\n") == "abc111111111"


def test_list_filters_orders_and_pages(store: SqlStore) -> None:
    for i in range(5):
        store.create_experiment(name=f"run{i}", project="p" if i % 2 else "q", tags=["t"] if i == 3 else [])
    page = store.list_experiments(ExperimentFilter(limit=2))
    assert page.total == 5 and [e.name for e in page.items] == ["run4", "run3"]
    assert store.list_experiments(ExperimentFilter(project="p")).total == 2
    assert [e.name for e in store.list_experiments(ExperimentFilter(tag="t")).items] == ["run3"]
    assert store.list_experiments(ExperimentFilter(text="RUN2")).total == 1
    with pytest.raises(UsageError):
        store.list_experiments(ExperimentFilter(order_by="nope"))


def test_updates_of_experiment_and_replica_status(store: SqlStore) -> None:
    exp = store.create_experiment(name="a", project="p", replicas=_replicas())
    store.update_experiment(exp.id, status=ExperimentStatus.RUNNING, started_at=1.0, handle="123")
    store.update_replica(exp.id, "worker-1", state=ReplicaState.FAILED, exit_code=3, reason="boom")
    got = store.get_experiment(exp.id)
    assert (got.status, got.started_at, got.handle) == (ExperimentStatus.RUNNING, 1.0, "123")
    w1 = next(r for r in store.list_replicas(exp.id) if r.name == "worker-1")
    assert (w1.state, w1.exit_code, w1.reason) == (ReplicaState.FAILED, 3, "boom")
    with pytest.raises(NotFound):
        store.update_replica(exp.id, "worker-9", state=ReplicaState.RUNNING)


def _scalars(exp: str, stream: str, seq: int, series: str, steps: range) -> Event:
    points = [["loss", series, i, i / 10, 1.0] for i in steps]
    return Event(
        exp, EventKind.SCALAR, {"points": points}, replica="worker-0", rank=1, stream=stream, seq=seq
    )


def test_write_events_is_idempotent_on_stream_and_seq(store: SqlStore) -> None:
    exp = store.create_experiment(name="a", project="p").id
    batch = [
        _scalars(exp, "s1", 0, "worker 00", range(100)),
        _scalars(exp, "s1", 1, "worker 00", range(100, 200)),
    ]
    assert store.write_events(batch) == 2
    assert store.write_events(batch) == 0
    assert store.write_events([*batch, _scalars(exp, "s1", 2, "worker 00", range(200, 250))]) == 1
    series = store.metrics(exp)["loss"]["worker 00"]
    assert series.steps == list(range(250))
    assert series.values[10] == pytest.approx(1.0)


def test_metrics_are_grouped_by_title_and_series_and_filtered(store: SqlStore) -> None:
    exp = store.create_experiment(name="a", project="p").id
    store.write_events(
        [
            _scalars(exp, "a", 0, "worker 00", range(3)),
            _scalars(exp, "b", 0, "worker 01", range(5)),
            Event(
                exp,
                EventKind.SCALAR,
                {"title": "acc", "series": "master", "step": 7, "value": 0.9},
                stream="c",
            ),
        ]
    )
    assert store.metric_titles(exp) == {"acc": ["master"], "loss": ["worker 00", "worker 01"]}
    only = store.metrics(exp, title="loss", series="worker 01")
    assert list(only) == ["loss"] and list(only["loss"]) == ["worker 01"]
    assert store.metrics(exp, title="acc")["acc"]["master"].steps == [7]


def test_params_are_append_only_and_merged_per_key(store: SqlStore) -> None:
    exp = store.create_experiment(name="a", project="p").id

    def param(rank: int, values: dict[str, object], t: float, section: str = "General") -> Event:
        return Event(exp, EventKind.PARAM, {"section": section, "values": values}, rank=rank, time=t)

    store.write_events([param(0, {"lr": 0.1, "shared": "old"}, 1.0), param(1, {"worker_1_stuff": "x"}, 2.0)])
    store.write_events([param(0, {"shared": "new"}, 3.0), param(0, {"epochs": 3}, 4.0, section="Args")])
    merged = {(p.section, p.key): (p.value, p.rank) for p in store.params(exp)}
    assert merged == {
        ("Args", "epochs"): (3, 0),
        ("General", "lr"): (0.1, 0),
        ("General", "shared"): ("new", 0),  # the same writer's later report replaces its earlier one
        ("General", "worker_1_stuff"): ("x", 1),
    }


def test_params_keep_each_ranks_value_when_ranks_differ_and_one_when_they_agree(store: SqlStore) -> None:
    exp = store.create_experiment(name="a", project="p").id

    def args(replica: str, rank: int, values: dict[str, object], t: float) -> Event:
        data = {"section": "Args", "values": values}
        return Event(exp, EventKind.PARAM, data, replica=replica, rank=rank, time=t)

    store.write_events(
        [
            args("master", 0, {"rank": 0, "seed": 100, "lr": 0.1}, 1.0),
            args("worker-0", 1, {"rank": 1, "seed": 101, "lr": 0.1}, 2.0),
            args("worker-0", 2, {"rank": 2, "seed": 102, "lr": 0.1}, 3.0),  # 2 processes per replica
            args("worker-1", 3, {"rank": 3, "seed": 103, "lr": 0.1}, 0.5),  # reported first
        ]
    )
    store.write_events([args("worker-0", 2, {"seed": 7}, 4.0)])  # this rank re-seeds: its latest counts
    records = store.params(exp)
    by_key: dict[str, list[tuple[str, int | None, object]]] = {}
    for p in records:
        by_key.setdefault(p.key, []).append((p.replica, p.rank, p.value))
    assert by_key["lr"] == [("worker-0", 2, 0.1)]  # all agree: one record, the latest report
    assert by_key["rank"] == [("master", 0, 0), ("worker-0", 1, 1), ("worker-0", 2, 2), ("worker-1", 3, 3)]
    assert by_key["seed"] == [
        ("master", 0, 100),
        ("worker-0", 1, 101),
        ("worker-0", 2, 7),
        ("worker-1", 3, 103),
    ]
    assert [p.key for p in records] == ["lr", "rank", "rank", "rank", "rank", "seed", "seed", "seed", "seed"]


def test_log_offsets_are_per_replica_and_stable(store: SqlStore) -> None:
    exp = store.create_experiment(name="a", project="p").id
    store.write_events([Event(exp, EventKind.LOG, {"text": "a\nb\n"}, replica="master", time=1.0)])
    store.write_events([Event(exp, EventKind.LOG, {"lines": ["x"]}, replica="worker-0", time=2.0)])
    store.write_events(
        [Event(exp, EventKind.LOG, {"lines": ["c"], "stream": "stderr"}, replica="master", time=3.0)]
    )
    assert [(line.offset, line.text) for line in store.logs(exp, replica="master")] == [
        (0, "a"),
        (1, "b"),
        (2, "c"),
    ]
    assert [line.text for line in store.logs(exp, replica="master", offset=2)] == ["c"]
    assert store.logs(exp, replica="master")[2].stream == "stderr"
    assert [line.replica for line in store.logs(exp)] == ["master", "master", "worker-0", "master"]


def test_artifacts_models_and_texts_are_recorded(store: SqlStore) -> None:
    exp = store.create_experiment(name="a", project="p").id
    art = {"name": "temp 00", "kind": "json", "path": "artifacts/temp 00.json", "size": 5}
    store.write_events(
        [
            Event(exp, EventKind.ARTIFACT, art, rank=0),
            Event(exp, EventKind.ARTIFACT, {**art, "size": 6}, rank=0),  # same name: replaced
            Event(
                exp, EventKind.MODEL, {"name": "net", "format": "onnx", "path": "models/net.onnx", "size": 9}
            ),
            Event(exp, EventKind.TEXT, {"title": "note", "text": "hello", "step": 3}),
        ]
    )
    [a] = store.artifacts(exp)
    assert (a.name, a.size, a.rank) == ("temp 00", 6, 0)
    assert store.models(exp)[0].format == "onnx"
    assert store.texts(exp)[0]["text"] == "hello"


def test_experiment_and_status_events_create_and_finish_a_plain_script_run(store: SqlStore) -> None:
    store.write_events(
        [
            Event(
                "0123456789ab",
                EventKind.EXPERIMENT,
                {"name": "t", "project": "p", "pid": 5},
                time=10.0,
                rank=0,
            )
        ]
    )
    assert store.get_experiment("0123456789ab").status == ExperimentStatus.RUNNING
    store.write_events(
        [Event("0123456789ab", EventKind.STATUS, {"status": "failed", "reason": "ValueError"}, time=11.0)]
    )
    exp = store.get_experiment("0123456789ab")
    assert (exp.status, exp.finished_at, exp.reason) == (ExperimentStatus.FAILED, 11.0, "ValueError")
    assert store.list_replicas(exp.id)[0].state == ReplicaState.FAILED


def test_delete_removes_rows_and_files_but_not_while_running(store: SqlStore) -> None:
    exp = store.create_experiment(name="a", project="p", replicas=_replicas()).id
    store.write_events([_scalars(exp, "s", 0, "w", range(10))])
    assert store.artifact_store is not None
    store.artifact_store.put_bytes(exp, "artifacts/x.json", b"{}")
    store.update_experiment(exp, status=ExperimentStatus.RUNNING)
    with pytest.raises(Conflict):
        store.delete_experiment(exp)
    store.update_experiment(exp, status=ExperimentStatus.SUCCEEDED)
    store.delete_experiment(exp)
    with pytest.raises(NotFound):
        store.get_experiment(exp)
    assert not store.artifact_store.exists(exp, "artifacts/x.json")


def test_ingest_batch_moves_the_position_only_from_the_expected_one(store: SqlStore) -> None:
    exp = store.create_experiment(name="a", project="p").id
    assert store.ingest_position("s") == (0, -1)
    assert store.ingest_batch("s", 0, 100, 0, [_scalars(exp, "s", 0, "w", range(5))]) == 1
    assert store.ingest_batch("s", 0, 100, 0, [_scalars(exp, "s", 0, "w", range(5))]) is None
    assert store.ingest_position("s") == (100, 0)
    assert len(store.metrics(exp)["loss"]["w"].steps) == 5


def test_a_100k_point_series_reads_back_in_one_query(store: SqlStore) -> None:
    exp = store.create_experiment(name="a", project="p").id
    store.write_events([_scalars(exp, "s", i, "w", range(i * 20_000, (i + 1) * 20_000)) for i in range(5)])
    started = time.process_time()  # CPU time (SQLite runs in this process): load does not inflate it
    series = store.metrics(exp, title="loss")["loss"]["w"]
    elapsed = time.process_time() - started
    assert len(series.steps) == 100_000 and series.steps == sorted(series.steps)
    assert elapsed < 5.0  # a sanity bound only; bench/tracking.py measures it


def test_nan_and_infinite_values_survive_the_round_trip(store: SqlStore) -> None:
    exp = store.create_experiment(name="a", project="p").id
    points = [
        ["loss", "w", 0, float("nan"), 1.0],
        ["loss", "w", 1, float("inf"), 1.0],
        ["loss", "w", 2, 0.5, 1.0],
    ]
    store.write_events([Event(exp, EventKind.SCALAR, {"points": points}, stream="s", seq=0)])
    values = store.metrics(exp)["loss"]["w"].values
    assert math.isnan(values[0]) and values[1:] == [float("inf"), 0.5]


def test_an_artifact_name_held_by_another_rank_is_kept_under_a_qualified_name(store: SqlStore) -> None:
    exp = store.create_experiment(name="a", project="p").id

    def upload(replica: str, rank: int, path: str, seq: int) -> Event:
        data = {"name": "ckpt", "kind": "json", "path": path, "size": 1}
        return Event(exp, EventKind.ARTIFACT, data, replica=replica, rank=rank, stream="s", seq=seq)

    store.write_events([upload("worker-0", 1, "artifacts/a/ckpt.json", 0)])
    store.write_events(
        [upload("worker-1", 2, "artifacts/b/ckpt.json", 1), upload("worker-0", 1, "artifacts/a/2.json", 2)]
    )
    store.write_events([upload("worker-1", 2, "artifacts/b/3.json", 3)])  # its own again: replaced
    assert [(a.name, a.rank, a.path) for a in store.artifacts(exp)] == [
        ("ckpt", 1, "artifacts/a/2.json"),
        ("ckpt [worker-1 rank 2]", 2, "artifacts/b/3.json"),
    ]


def test_non_finite_parameters_and_metadata_are_stored_as_text_not_refused(store: SqlStore) -> None:
    # argparse's `default=float("inf")` (no limit) is common; PostgreSQL's JSON refuses NaN/Infinity,
    # which used to fail the whole batch (and every batch after it) at ingest
    exp = store.create_experiment(name="a", project="p").id
    values = {
        "clip": float("inf"),
        "floor": float("-inf"),
        "x": float("nan"),
        "lr": 0.1,
        "ls": [1.0, float("nan")],
    }
    artifact = {"name": "a", "kind": "json", "path": "a.json", "metadata": {"loss": float("nan"), "n": 2}}
    events = [
        Event(exp, EventKind.PARAM, {"section": "Args", "values": values}, stream="s", seq=0),
        Event(exp, EventKind.ARTIFACT, artifact, stream="s", seq=1),
        Event(exp, EventKind.PARAM, {"section": "General", "values": {"after": 1}}, stream="s", seq=2),
    ]
    assert store.write_events(events) == 3
    stored = {(p.section, p.key): p.value for p in store.params(exp)}
    assert stored == {
        ("Args", "clip"): "inf",
        ("Args", "floor"): "-inf",
        ("Args", "x"): "nan",
        ("Args", "lr"): 0.1,
        ("Args", "ls"): [1.0, "nan"],
        ("General", "after"): 1,
    }
    assert dict(store.artifacts(exp)[0].metadata) == {"loss": "nan", "n": 2}


def test_text_postgresql_would_refuse_is_cleaned_or_refused_alone(store: SqlStore) -> None:
    exp = store.create_experiment(name="a", project="p").id
    store.write_events([Event(exp, EventKind.LOG, {"lines": ["bin\x00ary"]}, stream="s", seq=0)])
    assert store.logs(exp)[0].text == "bin\ufffdary"
    with pytest.raises(UsageError, match="longer than 255"):
        store.write_events([Event(exp, EventKind.PARAM, {"values": {"k" * 300: 1}}, stream="s", seq=1)])
    assert store.params(exp) == []
