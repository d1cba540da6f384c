"""Ingest: spool files into the store exactly once, whatever crashes in between."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from phalanx.config import Settings
from phalanx.errors import UsageError
from phalanx.ingest import Ingester, following, lease_for
from phalanx.machine.procs import INGESTER_RECORD, record_process, recorded_process
from phalanx.spool import SpoolWriter, encode_points, read_ack
from phalanx.store.artifacts import ArtifactStore
from phalanx.store.spool_records import records_to_events, store_artifact_bytes
from phalanx.store.sql import SqlStore
from phalanx.tracking.screen import TEXT_LIMIT
from tests.support import postgres


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SqlStore]:
    """Ingest runs on SQLite and on a real PostgreSQL server."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'phalanx.db'}"
    else:
        reason = postgres.unavailable_reason()
        if reason:
            pytest.skip(reason)
        url = postgres.shared_postgres().create_database()
    s = SqlStore(url, ArtifactStore(str(tmp_path / "artifacts")))
    yield s
    s.close()


def _points(start: int, n: int, series: str = "worker 00") -> dict[str, object]:
    return encode_points([("loss", series, i, i / 2, 1.0) for i in range(start, start + n)])


def _writer(tmp_path: Path, exp: str, **kw: object) -> SpoolWriter:
    return SpoolWriter(tmp_path / "spool" / exp, experiment_id=exp, **kw)  # type: ignore[arg-type]


def _steps(store: SqlStore, exp: str, series: str = "worker 00") -> list[int]:
    return store.metrics(exp).get("loss", {}).get(series, None).steps  # type: ignore[union-attr]


def test_records_are_stored_once_however_often_ingest_runs(store: SqlStore, tmp_path: Path) -> None:
    exp = store.create_experiment(name="a", project="p").id
    w = _writer(tmp_path, exp)
    for b in range(5):
        w.write("scalar", _points(b * 100, 100))
    w.sync()
    assert Ingester(store, None, tmp_path / "spool").run_once() == 5
    assert Ingester(store, None, tmp_path / "spool").run_once() == 0  # a fresh ingester: position stored
    w.write("scalar", _points(500, 100))
    assert Ingester(store, None, tmp_path / "spool").run_once() == 1
    assert _steps(store, exp) == list(range(600))
    assert read_ack(w.spool_dir, w.stream) == 5


def test_a_trailing_partial_record_waits_until_it_is_complete(store: SqlStore, tmp_path: Path) -> None:
    exp = store.create_experiment(name="a", project="p").id
    w = _writer(tmp_path, exp)
    w.write("scalar", _points(0, 10))
    line = json.dumps({**w.record("scalar", _points(10, 10)), "stream": w.stream, "seq": 1}) + "\n"
    with open(w.path, "a") as fh:
        fh.write(line[:20])  # a writer killed mid-record leaves this
    ingester = Ingester(store, None, tmp_path / "spool", cleanup=False)
    assert ingester.run_once() == 1
    with open(w.path, "a") as fh:
        fh.write(line[20:])
    assert ingester.run_once() == 1
    assert _steps(store, exp) == list(range(20))


def test_a_malformed_line_is_skipped_and_later_records_still_arrive(store: SqlStore, tmp_path: Path) -> None:
    exp = store.create_experiment(name="a", project="p").id
    w = _writer(tmp_path, exp)
    w.write("scalar", _points(0, 5))
    with open(w.path, "a") as fh:
        fh.write("this is not json\n")
        fh.write(json.dumps({"stream": w.stream, "seq": 99, "kind": "nonsense", "experiment_id": exp}) + "\n")
    w._seq = 100
    w.write("scalar", _points(5, 5))
    assert Ingester(store, None, tmp_path / "spool").run_once() == 2
    assert _steps(store, exp) == list(range(10))


def test_a_number_the_database_cannot_hold_is_left_out_and_never_stops_the_stream(
    store: SqlStore, tmp_path: Path
) -> None:
    """A step beyond 64 bits, a rank beyond 32 (a job writes its spool as it likes): that record is
    refused like any malformed one; the stream's later records are stored (they used to fail with
    it at every pass, for good)."""
    exp = store.create_experiment(name="a", project="p").id
    w = _writer(tmp_path, exp)
    w.write("scalar", {"points": [["loss", "worker 00", 2**64, 1.0, 1.0]]})
    with open(w.path, "a") as fh:
        fh.write(
            json.dumps(
                {
                    "stream": w.stream,
                    "seq": 1,
                    "kind": "scalar",
                    "experiment_id": exp,
                    "rank": 2**40,
                    "data": _points(0, 1),
                }
            )
            + "\n"
        )
    w._seq = 2
    w.write("scalar", _points(5, 5))
    w.log("after")
    ingester = Ingester(store, None, tmp_path / "spool")
    assert ingester.run_once() == 2
    assert _steps(store, exp) == list(range(5, 10))
    assert [line.text for line in store.logs(exp)] == ["after"]


def test_console_lines_are_stored_once_each_as_printed_and_a_malformed_log_record_is_left_out(
    store: SqlStore, tmp_path: Path
) -> None:
    """A chatty replica's lines go in through the driver (store.sql.driver), checked for their shape
    before the batch's transaction: every line stored once, in order, cut and cleaned as before; a
    record whose lines are not texts is refused alone."""
    exp = store.create_experiment(name="a", project="p").id
    w = _writer(tmp_path, exp)
    long = "x" * (TEXT_LIMIT + 5)
    w.write("log", {"stream": "stdout", "lines": [f"step {i}" for i in range(3_000)]})
    w.write("log", {"stream": "stdout", "lines": "not a list of lines"})
    w.write("log", {"stream": "stdout", "lines": ["ok", {"an": "object"}]})
    w.write("log", {"stream": "stderr", "lines": ["nul \x00 here", long, "last"]})
    Ingester(store, None, tmp_path / "spool").run_once()
    lines = store.logs(exp, limit=10_000)
    texts = [line.text for line in lines]
    assert texts[:3_000] == [f"step {i}" for i in range(3_000)]
    assert texts[3_000] == "nul \ufffd here"
    assert texts[3_001] == "x" * TEXT_LIMIT + " [truncated by phalanx: 5 more characters]"
    assert texts[3_002:] == ["last"]
    assert [line.offset for line in lines] == list(range(3_003))
    assert {line.stream for line in lines[3_000:]} == {"stderr"}


def test_concurrent_ingesters_store_each_record_once(store: SqlStore, tmp_path: Path) -> None:
    exp = store.create_experiment(name="a", project="p").id
    writers = [_writer(tmp_path, exp) for _ in range(3)]
    for i, w in enumerate(writers):
        for b in range(20):
            w.write("scalar", _points(b * 50, 50, series=f"worker {i:02d}"))
    stop = threading.Event()
    ingesters = [Ingester(store, None, tmp_path / "spool", batch_bytes=4096) for _ in range(3)]
    threads = [threading.Thread(target=ing.run, args=(stop, 0.01)) for ing in ingesters]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and any(read_ack(w.spool_dir, w.stream) < 19 for w in writers):
        time.sleep(0.05)
    stop.set()
    for t in threads:
        t.join(60)
    for i in range(3):
        assert _steps(store, exp, f"worker {i:02d}") == list(range(1000))


def test_artifact_files_move_into_the_artifact_store(store: SqlStore, tmp_path: Path) -> None:
    exp = store.create_experiment(name="a", project="p").id
    w = _writer(tmp_path, exp)
    source = w.spool_dir / "files" / "x" / "cfg.json"
    source.parent.mkdir(parents=True)
    source.write_text('{"a": 1}')
    data = {
        "name": "cfg",
        "kind": "json",
        "path": "artifacts/cfg.json",
        "spool_path": "files/x/cfg.json",
        "size": 8,
    }
    w.write("artifact", data)
    Ingester(store, None, tmp_path / "spool").run_once()
    [record] = store.artifacts(exp)
    assert record.path == "artifacts/cfg.json"
    assert store.artifact_store is not None
    assert store.artifact_store.read_bytes(exp, "artifacts/cfg.json") == b'{"a": 1}'
    assert not source.exists()


def test_an_artifact_path_cannot_leave_the_experiment_folder(store: SqlStore, tmp_path: Path) -> None:
    exp = store.create_experiment(name="a", project="p").id
    w = _writer(tmp_path, exp)
    w.write("artifact", {"name": "evil", "path": "../../etc/passwd", "size": 1})
    w.write("artifact", {"name": "abs", "path": "/etc/passwd", "size": 1})
    Ingester(store, None, tmp_path / "spool").run_once()
    assert store.artifacts(exp) == []
    assert store.artifact_store is not None
    with pytest.raises(UsageError):
        store_artifact_bytes(store.artifact_store, exp, "a/../../b", b"x")
    assert store_artifact_bytes(store.artifact_store, exp, "files/ok.bin", b"xyz") == 3


def test_records_to_events_names_what_is_wrong() -> None:
    good = {"stream": "s", "seq": 0, "kind": "param", "experiment_id": "e", "data": {"values": {"a": 1}}}
    [event] = records_to_events([good])
    assert (event.stream, event.seq, event.data["values"]) == ("s", 0, {"a": 1})
    with pytest.raises(UsageError, match=r"events\[1\].*kind"):
        records_to_events([good, {**good, "kind": "bogus"}])
    with pytest.raises(UsageError, match="experiment_id"):
        records_to_events([{**good, "experiment_id": ""}])
    with pytest.raises(UsageError, match="scalar"):
        records_to_events(
            [{**good, "kind": "scalar", "data": {"keys": [["a", "b"]], "n": 3, "step": "AAAA"}}]
        )


def test_a_running_ingester_records_itself_and_clears_its_record(store: SqlStore, tmp_path: Path) -> None:
    """``runs/<id>/ingester.pid`` names the ingester's process while it drains the folder (reads
    leave the folder to it) and is gone once its final pass is done (reads ingest again)."""
    exp = store.create_experiment(name="a", project="p").id
    w = _writer(tmp_path, exp)
    w.write("scalar", _points(0, 10))
    lease = tmp_path / "runs" / exp / INGESTER_RECORD
    stop = threading.Event()
    ingester = Ingester(store, None, tmp_path / "spool" / exp)
    thread = threading.Thread(target=ingester.run, args=(stop, 0.01), kwargs={"lease": lease})
    thread.start()
    try:
        assert w.wait_for_ack(timeout=60)  # acked: the loop runs, inside its record
        assert recorded_process(lease) == os.getpid()
    finally:
        stop.set()
        thread.join(timeout=60)
    assert not thread.is_alive()
    assert not lease.exists()
    assert _steps(store, exp) == list(range(10))


def test_following_leaves_another_processs_record(tmp_path: Path) -> None:
    lease = tmp_path / "runs" / "x" / INGESTER_RECORD
    with following(lease):
        assert recorded_process(lease) == os.getpid()
        record_process(lease, pid=os.getppid())  # another ingester took the folder over meanwhile
    assert recorded_process(lease) == os.getppid()
    with following(None):  # no folder of an experiment: nothing recorded
        pass


def test_an_ingester_records_itself_only_for_an_experiments_folder(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path / "home", db_url=None, artifacts_url=None)
    assert lease_for(settings, settings.spool_dir / "0123456789ab") == (
        settings.runs_dir / "0123456789ab" / INGESTER_RECORD
    )
    assert lease_for(settings, settings.spool_dir) is None
    assert lease_for(settings, tmp_path / "elsewhere" / "0123456789ab") is None
