"""Several ingesters share one folder (issue 42): one at a time works on a spool file's batch
(``spool.taking``), another leaves that file to it and takes the next, and every record is stored
once. The helper processes themselves: tests/integration/processes/test_ingest_helpers.py."""

from __future__ import annotations

import errno
import fcntl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from phalanx import ingest, ingest_helpers
from phalanx.config import Settings, sqlite_url
from phalanx.ingest import Ingester
from phalanx.ingest_helpers import Helpers, helper_env
from phalanx.spool import SpoolWriter, encode_points, read_ack, taking
from phalanx.store import open_store
from phalanx.store.base import LocalStore


@pytest.fixture
def home(tmp_path: Path) -> Iterator[tuple[Settings, LocalStore, str]]:
    settings = Settings(home=tmp_path / "home", db_url=None, artifacts_url=None)
    store = open_store(settings)
    exp = store.create_experiment(name="flood", project="p").id
    yield settings, store, exp
    store.close()


def _report(settings: Settings, exp: str, writers: int, records: int, points: int = 500) -> list[SpoolWriter]:
    """``writers`` replicas' spool files, each of ``records`` records of ``points`` points."""
    out = []
    for rank in range(writers):
        w = SpoolWriter(settings.spool_dir / exp, experiment_id=exp, rank=rank, replica=f"worker-{rank}")
        for r in range(records):
            pts = [("loss", f"r{rank}", s, s / 3, 1.0) for s in range(r * points, (r + 1) * points)]
            w.write("scalar", encode_points(pts))
        w.sync()
        out.append(w)
    return out


def _stored(store: LocalStore, exp: str) -> dict[str, list[int]]:
    return {name: s.steps for name, s in store.metrics(exp).get("loss", {}).items()}


def test_a_file_another_ingester_holds_is_left_to_it_until_it_lets_go(
    home: tuple[Settings, LocalStore, str],
) -> None:
    settings, store, exp = home
    held, free = _report(settings, exp, writers=2, records=3)
    ingester = Ingester(store, None, settings.spool_dir / exp, cleanup=False)
    with taking(held.path) as mine:
        assert mine
        assert ingester.run_once(skip_held=True) == 3  # the other file's records; this one is another's
        assert set(_stored(store, exp)) == {"r1"}
        assert read_ack(held.spool_dir, held.stream) == -1 and read_ack(free.spool_dir, free.stream) == 2
    assert ingester.run_once(skip_held=True) == 3
    assert _stored(store, exp) == {"r0": list(range(1500)), "r1": list(range(1500))}


def test_a_pass_that_must_see_everything_reads_beside_a_holder_that_never_lets_go(
    home: tuple[Settings, LocalStore, str],
) -> None:
    """A read command's pass, a restart's look for the latest checkpoint: a holder stopped mid-batch
    (Ctrl-Z) costs them PATIENCE_S once, not a batch each, and its records are stored once."""
    settings, store, exp = home
    (held,) = _report(settings, exp, writers=1, records=3)
    ingester = Ingester(store, None, settings.spool_dir / exp, cleanup=False, batch_bytes=4096)
    with taking(held.path):
        assert ingester.run_once() == 3
        assert read_ack(held.spool_dir, held.stream) == 2
    assert ingester.run_once() == 0
    assert _stored(store, exp) == {"r0": list(range(1500))}


def test_an_ingesters_last_pass_waits_for_a_file_another_holds(
    home: tuple[Settings, LocalStore, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its replicas have exited: what they left is stored before the supervisor records the end,
    after the batch another ingester (a helper) holds rather than beside it."""
    settings, store, exp = home
    (held,) = _report(settings, exp, writers=1, records=2)
    stop = threading.Event()
    stop.set()  # straight to the last pass
    monkeypatch.setattr(ingest, "PATIENCE_S", 600.0)  # this test lets go long before; a loaded CI too
    ingester = Ingester(store, None, settings.spool_dir / exp, cleanup=False)
    with taking(held.path):
        thread = threading.Thread(target=ingester.run, args=(stop,))
        thread.start()
        thread.join(timeout=0.3)
        assert thread.is_alive()  # waiting for the file, not done without it
    thread.join()
    assert _stored(store, exp) == {"r0": list(range(1000))}


def test_no_helper_for_one_file_little_waiting_or_another_database(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path, db_url=None, artifacts_url=None)
    helpers = Helpers(settings, tmp_path / "spool", tmp_path / "helpers.log", claimed=False, most=4)
    helpers.grow(1 << 30, files=1)  # one replica: its ingester keeps its order
    helpers.grow(1 << 10, files=8)  # little waiting: not worth a process's start
    assert helpers.running == 0
    remote = Settings(home=tmp_path, db_url="postgresql://db.invalid/phalanx", artifacts_url=None)
    assert Helpers(remote, tmp_path / "spool", tmp_path / "helpers.log", claimed=False).most == 0


def test_a_helper_is_told_the_store_its_ingester_was_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Settings given as keywords (a bench's, a test's) reach the helper, never another home's, and
    relative ones as absolute paths: a helper works in the store's home, not in this folder."""
    monkeypatch.setenv("PHALANX_HOME", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("PHALANX_DB_URL", "sqlite:////elsewhere.db")
    env = helper_env(Settings(home=tmp_path / "mine", db_url=None, artifacts_url=None))
    assert env["PHALANX_HOME"] == str(tmp_path / "mine")
    assert env["PHALANX_DB_URL"] == sqlite_url(tmp_path / "mine" / "phalanx.db")
    assert env["PHALANX_ARTIFACTS_URL"] == str(tmp_path / "mine" / "artifacts")
    monkeypatch.chdir(tmp_path)
    env = helper_env(Settings(home=Path("h"), db_url="sqlite:///w/my%20db", artifacts_url="s3://bucket/a"))
    assert env["PHALANX_HOME"] == str(tmp_path / "h")
    assert env["PHALANX_DB_URL"] == sqlite_url(tmp_path / "w" / "my db")
    assert env["PHALANX_ARTIFACTS_URL"] == "s3://bucket/a"
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    for given, meant in (
        ("~/arts", tmp_path / "user" / "arts"),
        ("file://rel/arts", tmp_path / "rel" / "arts"),
    ):
        env = helper_env(Settings(home=Path("h"), db_url=None, artifacts_url=given))
        assert env["PHALANX_ARTIFACTS_URL"] == str(meant)  # where fsspec puts this process's files


def test_the_helpers_knob_bounds_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings(home=tmp_path, db_url=None, artifacts_url=None)
    monkeypatch.setenv("PHALANX_INGEST_HELPERS", "0")
    assert Helpers(settings, tmp_path, tmp_path / "helpers.log", claimed=False).most == 0
    monkeypatch.setenv("PHALANX_INGEST_HELPERS", "3")
    assert Helpers(settings, tmp_path, tmp_path / "helpers.log", claimed=False).most == 3


def test_an_acknowledgement_lost_between_commit_and_ack_is_written_by_the_next_ingester(
    home: tuple[Settings, LocalStore, str],
) -> None:
    """A helper stopped (or killed) right after its commit: the replica's flush() still hears that
    its records are stored, from the next ingester that looks at the file."""
    settings, store, exp = home
    (w,) = _report(settings, exp, writers=1, records=2)
    assert Ingester(store, None, settings.spool_dir / exp, cleanup=False).run_once() == 2
    w.path.with_suffix(".ack").unlink()
    assert w.acked() == -1
    assert Ingester(store, None, settings.spool_dir / exp, cleanup=False).run_once() == 0
    assert w.acked() == 1


def test_a_file_system_without_flock_is_ingested_unlocked_and_gets_no_helpers(
    home: tuple[Settings, LocalStore, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """NFS without its lock daemon (ENOLCK): records are stored once and acknowledged, as before
    files were locked; no helper would be held off another's batch there, so none is started."""
    settings, store, exp = home
    writers = _report(settings, exp, writers=2, records=2)

    def no_lock(fd: int, how: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_lock)
    assert Ingester(store, None, settings.spool_dir / exp, cleanup=False).run_once(skip_held=True) == 4
    assert _stored(store, exp) == {"r0": list(range(1000)), "r1": list(range(1000))}
    assert [w.acked() for w in writers] == [1, 1]
    assert (
        Helpers(settings, settings.spool_dir / exp, settings.home / "h.log", claimed=True, most=3).most == 0
    )


def test_a_helper_that_cannot_start_leaves_its_ingester_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No process to spare (EAGAIN): one try, a warning, and none again, never a loop."""
    settings = Settings(home=tmp_path, db_url=None, artifacts_url=None)
    tries: list[int] = []

    def refused(*args: object, **kwargs: object) -> None:
        tries.append(1)
        raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")

    monkeypatch.setattr(ingest_helpers.subprocess, "Popen", refused)
    helpers = Helpers(settings, tmp_path, tmp_path / "helpers.log", claimed=False, most=3, start_bytes=1)
    helpers.grow(1 << 20, files=4)
    helpers.grow(1 << 20, files=4)
    assert (len(tries), helpers.most, helpers.running) == (1, 0, 0)
