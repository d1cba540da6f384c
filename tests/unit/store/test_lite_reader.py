"""The lean SQLite reader (`phalanx ls` without SQLAlchemy) answers exactly what SqlStore answers."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from phalanx.domain import Event, EventKind, ExperimentFilter, ExperimentStatus, Replica, Role
from phalanx.errors import NotFound
from phalanx.store.artifacts import ArtifactStore
from phalanx.store.lite import LiteReader, sqlite_path
from phalanx.store.migrations import HEAD
from phalanx.store.sql import SqlStore
from tests.unit.server import fill


@pytest.fixture
def filled(tmp_path: Path) -> tuple[SqlStore, str]:
    url = f"sqlite:///{tmp_path / 'phalanx.db'}"
    store = SqlStore(url, ArtifactStore(str(tmp_path / "artifacts")))
    statuses = list(ExperimentStatus)
    for i in range(23):
        replicas = [
            Replica("", "ps-0", Role.PS, 0, None),
            Replica("", "worker-1", Role.WORKER, 1, 2, pid=100 + i, resources={"cpu": 2}),
            Replica("", "master", Role.MASTER, 0, 0, host="h"),
        ]
        store.create_experiment(
            name=f"run_{i % 4}%",
            project="vision" if i % 3 else "Speech_x",
            replicas=replicas if i % 2 else (),
            framework="pytorch" if i % 2 else None,
            backend="local",
            tags=("a", "b_c") if i % 5 == 0 else ("b",),
            topology={"master": 1, "worker": 2},
            spec_text="version: 1" if i % 4 else None,
            plan={"replicas": [i]},
            status=statuses[i % len(statuses)],
            created_at=1000.0 + (i % 7),  # ties: the id orders them
        )
    yield store, url
    store.close()


FILTERS = [
    ExperimentFilter(),
    ExperimentFilter(limit=5, offset=3),
    ExperimentFilter(status=ExperimentStatus.RUNNING),
    ExperimentFilter(project="vision", order_by="name"),
    ExperimentFilter(tag="b_c"),
    ExperimentFilter(tag="b"),
    ExperimentFilter(text="SPEECH"),
    ExperimentFilter(text="n_1%"),
    ExperimentFilter(text="_"),
    ExperimentFilter(order_by="-finished_at", limit=100),
    ExperimentFilter(order_by="+status", limit=100),
    ExperimentFilter(limit=0),
]


@pytest.mark.parametrize("query", FILTERS, ids=repr)
def test_lists_the_same_page_as_the_sql_store(filled: tuple[SqlStore, str], query: ExperimentFilter) -> None:
    store, url = filled
    reader = LiteReader.open(url, HEAD)
    assert reader is not None
    with reader:
        assert reader.list_experiments(query) == store.list_experiments(query)


def test_lists_replicas_and_knows_ids_as_the_sql_store(filled: tuple[SqlStore, str]) -> None:
    store, url = filled
    reader = LiteReader.open(url, HEAD)
    assert reader is not None
    with reader:
        for e in store.list_experiments(ExperimentFilter(limit=100)).items:
            assert reader.list_replicas(e.id) == store.list_replicas(e.id)
            assert reader.has_experiment(e.id)
        assert not reader.has_experiment("0" * 12)


def test_refuses_what_only_the_full_store_may_open(filled: tuple[SqlStore, str], tmp_path: Path) -> None:
    _, url = filled
    assert LiteReader.open(url, "an_older_head") is None  # the full store migrates it first
    assert LiteReader.open(f"sqlite:///{tmp_path / 'none.db'}", HEAD) is None
    assert not (tmp_path / "none.db").exists()  # nothing created
    assert LiteReader.open("postgresql://u@localhost/db", HEAD) is None
    sqlite3.connect(tmp_path / "empty.db").close()  # a file with no schema yet
    assert LiteReader.open(f"sqlite:///{tmp_path / 'empty.db'}", HEAD) is None


def test_sqlite_path_takes_plain_file_urls_only() -> None:
    assert sqlite_path("sqlite:////abs/p.db") == Path("/abs/p.db")
    assert sqlite_path("sqlite:///rel.db") == Path("rel.db")
    assert sqlite_path("sqlite://") is None
    assert sqlite_path("sqlite:///:memory:") is None
    assert sqlite_path("sqlite:///p.db?timeout=3") is None
    assert sqlite_path("postgresql+psycopg://x/y") is None


def test_finds_an_experiment_and_reads_its_consoles_as_the_sql_store(tmp_path: Path) -> None:
    """`phalanx logs ID` on the lean path: the id or a unique prefix, and the same lines."""
    url = f"sqlite:///{tmp_path / 'phalanx.db'}"
    store = SqlStore(url, ArtifactStore(str(tmp_path / "artifacts")))
    for eid in ("abc111111111", "abc222222222", "def333333333", "RunA", "runa"):  # (ingest's ids)
        store.create_experiment(name="n", project="p", experiment_id=eid, backend="local")
    lines = [
        ("master", "stdout", 0, 2.0),
        ("worker-1", "stderr", 0, 1.0),
        ("master", "stdout", 1, 3.0),
        ("build", "stdout", 0, 0.5),
        ("worker-1", "stdout", 1, 2.5),
    ]
    store.write_events(
        [
            Event("def333333333", EventKind.LOG, {"stream": s, "text": f"{r} {i}"}, replica=r, time=t, seq=n)
            for n, (r, s, i, t) in enumerate(lines)
        ]
    )
    reader = LiteReader.open(url, HEAD)
    assert reader is not None
    with reader:
        for text in ("def333333333", "def", " DEF3 ", "abc1", "abc222222222", "RunA", "runa", "RUNA"):
            found = reader.find_experiment(text)
            assert found == store.get_experiment(text), text
        wordy = ("abc", "zzz", "", "de-f", "d" * 40, "def333333333x", "def\udcff")  # (`$'def\xff'`)
        for text in wordy:  # the full store words these
            assert reader.find_experiment(text) is None, text
        with pytest.raises(NotFound, match="no experiment 'def\\\\udcff'"):  # `phalanx logs $'def\xff'`
            store.get_experiment("def\udcff")  # (sqlite3 cannot bind a lone surrogate: a traceback)
        for replica in ("master", "worker-1", "build", "nope", None):
            for offset in (0, 1, 5):
                for limit in (None, 1, 2):
                    assert reader.logs("def333333333", replica, offset, limit) == store.logs(
                        "def333333333", replica=replica, offset=offset, limit=limit
                    ), (replica, offset, limit)
    store.close()


def test_reads_an_experiments_scalars_as_the_sql_store(tmp_path: Path) -> None:
    """`phalanx metrics ID` on the lean path: every series, one title's, one series', none."""
    url = f"sqlite:///{tmp_path / 'phalanx.db'}"
    store = SqlStore(url, ArtifactStore(str(tmp_path / "artifacts")))
    exp = store.create_experiment(name="n", project="p", backend="local")
    fill.scalars(store, exp.id, "loss", "worker 00", [0.9, float("nan"), 0.4, -0.0])
    fill.scalars(store, exp.id, "loss", "worker 01", [1.0 / (i + 1) for i in range(5000)])  # 2 chunks
    fill.scalars(store, exp.id, "acc", "master", [0.5, 0.75])
    fill.scalars(store, exp.id, "loss", "worker 00", [0.3])  # a later batch of the same series
    reader = LiteReader.open(url, HEAD)
    assert reader is not None
    with reader:
        assert (
            reader.metric_titles(exp.id)
            == store.metric_titles(exp.id)
            == {
                "acc": ["master"],
                "loss": ["worker 00", "worker 01"],
            }
        )
        for title, series in (
            (None, None),
            ("loss", None),
            (None, "master"),
            ("loss", "worker 01"),
            ("x", None),
        ):
            assert repr(reader.metrics(exp.id, title, series)) == repr(store.metrics(exp.id, title, series))
        assert len(reader.metrics(exp.id, "loss", "worker 01")["loss"]["worker 01"].steps) == 5000
    store.close()


def test_reads_an_experiments_params_and_artifacts_as_the_sql_store(tmp_path: Path) -> None:
    """`phalanx params ID` and `artifacts ID` on the lean path: the same merged records (a writer's
    latest report, ranks that differ each kept, JSON values of every shape) and artifacts by name."""
    url = f"sqlite:///{tmp_path / 'phalanx.db'}"
    store = SqlStore(url, ArtifactStore(str(tmp_path / "artifacts")))
    exp = fill.experiment(store, name="p", project="p", n_workers=1)
    empty = fill.experiment(store, name="e", project="p", n_workers=0)
    for replica, rank, key, value, t in [
        ("master", 0, "lr", 0.1, 1.0),
        ("worker-0", 1, "lr", 0.1, 1.5),
        ("master", 0, "seed", 1, 2.0),
        ("worker-0", 1, "seed", 2, 2.5),
        ("master", 0, "lr", 0.05, 3.0),  # the master's latest report: now the ranks differ
        ("master", 0, "layers", {"sizes": [64, 32], "act": None, "deep": [[1.5]]}, 4.0),
        ("master", 0, "name", "résumé \x1b[31m", 5.0),
    ]:
        store.write_events(
            [
                Event(
                    exp.id,
                    EventKind.PARAM,
                    {"section": "Args", "key": key, "value": value},
                    replica=replica,
                    rank=rank,
                    time=t,
                    stream=f"s-{replica}",
                    seq=int(t * 10),
                )
            ]
        )
    for n, (name, rank, meta) in enumerate([("b.json", 0, {"title": "t"}), ("a.txt", None, None)]):
        data = {"name": name, "kind": "json", "path": f"artifacts/{name}", "size": 3 + n, "content_type": "x"}
        if meta is not None:
            data["meta"] = meta
        artifact = Event(exp.id, EventKind.ARTIFACT, data, rank=rank, time=9.0 + n, stream="a", seq=n)
        store.write_events([artifact])
    reader = LiteReader.open(url, HEAD)
    assert reader is not None
    with reader:
        for eid in (exp.id, empty.id):
            assert reader.params(eid) == store.params(eid)
            assert reader.artifacts(eid) == store.artifacts(eid)
        assert reader.params("nope") == [] and reader.artifacts("nope") == []  # found first (find_experiment)
        params = reader.params(exp.id)
        assert sorted((p.key, p.replica, p.value) for p in params if p.key in ("lr", "seed")) == [
            ("lr", "master", 0.05),
            ("lr", "worker-0", 0.1),
            ("seed", "master", 1),
            ("seed", "worker-0", 2),
        ]
        assert [a.name for a in reader.artifacts(exp.id)] == ["a.txt", "b.json"]
    store.close()


def test_reads_what_get_shows_as_the_sql_store(tmp_path: Path) -> None:
    """`phalanx get ID` on the lean path: models, reports, attempts (with the code each ran), what
    ran, the pods' own starts and the pace of each rank, the same as the full store's; an
    experiment without any of them answers the same empty values."""
    url = f"sqlite:///{tmp_path / 'phalanx.db'}"
    store = SqlStore(url, ArtifactStore(str(tmp_path / "artifacts")))
    exp = fill.experiment(store, name="g", project="p", n_workers=1, status=ExperimentStatus.RUNNING)
    empty = fill.experiment(store, name="e", project="p", n_workers=0)
    for replica, pace in (("master", 1), ("worker-0", 3)):  # two ranks of one title: a pace to show
        fill.scalars(
            store, exp.id, "loss", f"rank {replica}", [1.0 / (i + 1) for i in range(0, 60, pace)], replica
        )
    fill.scalars(store, exp.id, "acc", "master", [0.5] * 5000)  # more than one chunk: the last points only
    store.write_events(
        [
            fill.event(exp.id, EventKind.TEXT, {"title": "notes", "text": "line 1\nline 2", "step": 3}),
            fill.event(exp.id, EventKind.TEXT, {"title": "", "text": "no step"}, "worker-0"),
            fill.event(
                exp.id, EventKind.MODEL, {"name": "b", "format": "onnx", "path": "models/b", "size": 9}
            ),
            fill.event(
                exp.id,
                EventKind.MODEL,
                {"name": "a", "format": "pytorch", "path": "models/a", "size": 1, "metadata": {"k": [1.5]}},
            ),
        ]
    )
    first = store.add_attempt(exp.id, kind="start", started_at=10.0)
    store.finish_attempt(exp.id, first, status=ExperimentStatus.FAILED, reason="worker-0 exited 1")
    store.add_attempt(exp.id, kind="resume", checkpoint_step=40, started_at=20.0)
    store.next_attempt(exp.id, "worker-0", at_least=1)
    snapshots = [{"attempt": n, "snapshot": {"path": f"code/{n}.tar.gz"}} for n in (0, 1)]  # files gone
    store.set_repro(
        exp.id, {"git": {"commit": "c0ffee", "diff": "d"}, "python": "3.11", "attempts": snapshots}
    )
    reader = LiteReader.open(url, HEAD, str(tmp_path / "artifacts"))
    assert reader is not None
    with reader:
        assert reader.get_experiment(exp.id) == store.get_experiment(exp.id)
        for eid in (exp.id, empty.id):
            assert reader.models(eid) == store.models(eid)
            assert reader.texts(eid) == store.texts(eid)
            assert reader.repro(eid) == store.repro(eid)
            assert reader.attempts(eid) == store.attempts(eid)
            assert reader.replica_starts(eid) == store.replica_starts(eid)
            for title in ("loss", "acc", "nope"):
                assert reader.series_replicas(eid, title) == store.series_replicas(eid, title)
                for n in (0, 1, 7, 10_000):
                    assert repr(reader.last_points(eid, title, n)) == repr(store.last_points(eid, title, n))
        details = reader.run_details(exp.id)
        pace = details.pop("pace")
        expected = store.run_details(exp.id)
        expected_pace = expected.pop("pace")
        assert details == expected
        assert [r["replica"] for r in pace["ranks"]] == [r["replica"] for r in expected_pace["ranks"]]
        assert [r["replica"] for r in pace["ranks"]] == ["master", "worker-0"]  # series mapped to replicas
        assert [a["kind"] for a in details["attempts"]] == ["start", "resume"]
        assert details["pod_attempts"] == {"worker-0": 1} and details["source"]["git"] == {"commit": "c0ffee"}
        assert [m.name for m in reader.models(exp.id)] == ["a", "b"]
        assert list(reader.last_points(exp.id, "acc", 7)["master"].steps) == list(range(4993, 5000))
        assert reader.run_details(empty.id) == store.run_details(empty.id)
        with pytest.raises(NotFound):
            reader.get_experiment("nope")
    store.close()
