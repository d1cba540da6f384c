"""``readpass.upkeep_due``: the lean `phalanx ls` is taken only when the read pass has nothing to do."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from phalanx.config import Settings
from phalanx.domain import ExperimentStatus
from phalanx.machine.procs import INGESTER_RECORD, record_process
from phalanx.readpass import open_lean, upkeep_due
from phalanx.store import open_store
from phalanx.store.base import IngestStore
from phalanx.store.lite import LiteReader
from phalanx.store.migrations import HEAD


@pytest.fixture
def home(tmp_path: Path) -> Iterator[tuple[Settings, IngestStore]]:
    settings = Settings(home=tmp_path / "home", db_url=None, artifacts_url=None)
    store = open_store(settings)
    yield settings, store
    store.close()


def _due(settings: Settings) -> str | None:
    reader = LiteReader.open(settings.database_url, HEAD)
    assert reader is not None
    with reader:
        return upkeep_due(reader, settings)


def _gone(path: Path) -> None:
    """A pid file whose process is gone: a pid above the kernel's pid_max never runs."""
    never = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{never} 1 {socket.gethostname()}\n")


def test_nothing_due_in_a_quiet_store(home: tuple[Settings, IngestStore]) -> None:
    settings, store = home
    store.create_experiment(name="a", project="p", status=ExperimentStatus.SUCCEEDED)
    running = store.create_experiment(name="b", project="p", backend="local", status=ExperimentStatus.RUNNING)
    record_process(settings.runs_dir / running.id / "supervisor.pid")  # alive: this process
    assert _due(settings) is None
    reader = open_lean(settings)
    assert reader is not None
    reader.close()


def test_a_dead_supervisor_of_a_running_experiment_is_due(home: tuple[Settings, IngestStore]) -> None:
    settings, store = home
    exp = store.create_experiment(name="b", project="p", backend="local", status=ExperimentStatus.STARTING)
    _gone(settings.runs_dir / exp.id / "supervisor.pid")
    assert exp.id in (_due(settings) or "")
    assert open_lean(settings) is None


def test_a_killed_start_never_recorded_is_due(home: tuple[Settings, IngestStore]) -> None:
    settings, _ = home
    _gone(settings.runs_dir / "0123456789ab" / "supervisor.pid")
    assert "0123456789ab" in (_due(settings) or "")


def test_a_queued_experiment_whose_run_was_killed_is_due(home: tuple[Settings, IngestStore]) -> None:
    settings, store = home
    exp = store.create_experiment(name="q", project="p", backend="local", status=ExperimentStatus.QUEUED)
    assert _due(settings) is None  # no pid file here: another machine's, not ours to judge
    _gone(settings.runs_dir / exp.id / "supervisor.pid")
    assert exp.id in (_due(settings) or "")


def test_spool_bytes_not_yet_ingested_are_due(home: tuple[Settings, IngestStore]) -> None:
    settings, _ = home
    spool = settings.spool_dir / "0123456789ab"
    spool.mkdir(parents=True)
    (spool / f"{socket.gethostname()}-{os.getpid()}-x.spool").write_text('{"seq": 0}\n')
    assert "to ingest" in (_due(settings) or "")


def test_another_schema_revision_takes_the_full_path(home: tuple[Settings, IngestStore]) -> None:
    settings, _ = home
    assert LiteReader.open(settings.database_url, "0001_older") is None


def test_settings_read_the_environment_unless_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PHALANX_HOME", "/env/home")
    monkeypatch.setenv("phalanx_db_url", "sqlite:////env/db")  # case-insensitive, as pydantic-settings
    monkeypatch.delenv("PHALANX_TOKEN", raising=False)
    s = Settings()
    assert (s.home, s.db_url, s.token) == (Path("/env/home"), "sqlite:////env/db", None)
    given = Settings(home="/given", db_url=None)  # an explicit None wins over the environment
    assert (given.home, given.database_url) == (Path("/given"), "sqlite:////given/phalanx.db")
    assert Settings(home="/given", db_url=None) == given
    monkeypatch.setenv("PHALANX_TOKEN", "s3cret")
    assert "s3cret" not in repr(Settings())


def _reporting(settings: Settings, experiment_id: str) -> Path:
    """A spool file of a live writer (this process) holding a record not yet ingested."""
    spool = settings.spool_dir / experiment_id
    spool.mkdir(parents=True, exist_ok=True)
    path = spool / f"{socket.gethostname()}-{os.getpid()}-x.spool"
    path.write_text('{"seq": 0}\n')
    return path


def test_a_live_ingesters_folder_is_left_to_it(home: tuple[Settings, IngestStore]) -> None:
    """While an experiment reports, its spool is ahead of the store; its own ingester (alive, as its
    record in runs/<id> says) drains it, so `phalanx ls` stays on the lean path."""
    settings, _ = home
    _reporting(settings, "0123456789ab")
    record_process(settings.runs_dir / "0123456789ab" / INGESTER_RECORD)  # alive: this process
    assert _due(settings) is None
    reader = open_lean(settings)
    assert reader is not None
    reader.close()


def test_a_dead_ingesters_folder_is_due(home: tuple[Settings, IngestStore]) -> None:
    """An abandoned spool (its ingester killed, the writer still running) is ingested by the next read."""
    settings, _ = home
    _reporting(settings, "0123456789ab")
    _gone(settings.runs_dir / "0123456789ab" / INGESTER_RECORD)
    assert "to ingest" in (_due(settings) or "")
    assert open_lean(settings) is None


def test_another_folders_ingester_does_not_cover_this_one(home: tuple[Settings, IngestStore]) -> None:
    settings, _ = home
    record_process(settings.runs_dir / "0123456789ab" / INGESTER_RECORD)
    _reporting(settings, "0123456789ab")
    left = _reporting(settings, "ba9876543210")
    assert str(left) in (_due(settings) or "")


def test_a_file_at_the_spools_top_is_judged_by_itself(home: tuple[Settings, IngestStore]) -> None:
    """A stream directly in spool/ belongs to no experiment's folder: no ingester record covers it."""
    settings, _ = home
    settings.spool_dir.mkdir(parents=True)
    (settings.spool_dir / f"{socket.gethostname()}-{os.getpid()}-x.spool").write_text('{"seq": 0}\n')
    record_process(settings.runs_dir / settings.spool_dir.name / INGESTER_RECORD)
    assert "to ingest" in (_due(settings) or "")


def test_a_finished_writers_file_is_due_when_no_ingester_follows(home: tuple[Settings, IngestStore]) -> None:
    """Fully ingested (size 0 here) but its writer is gone: the read pass removes it."""
    settings, _ = home
    spool = settings.spool_dir / "0123456789ab"
    spool.mkdir(parents=True)
    never = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1
    (spool / f"{socket.gethostname()}-{never}-x.spool").write_text("")
    assert "remove" in (_due(settings) or "")
    record_process(settings.runs_dir / "0123456789ab" / INGESTER_RECORD)
    assert _due(settings) is None  # the live ingester removes it itself
