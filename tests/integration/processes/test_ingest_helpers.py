"""A supervisor's ingester that falls behind several replicas starts helper processes
(``phalanx.ingest_helpers``, issue 42): each stores what waits, through the standard library's
sqlite3, and ends once little is left or when its ingester stops; every record is stored once."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from tests.unit.test_ingest_sharing import _report, _stored
from tests.unit.test_ingest_sharing import home as home  # the fixture: a store and an experiment

from phalanx.config import Settings
from phalanx.ingest import Ingester
from phalanx.ingest_helpers import Helpers
from phalanx.store.base import LocalStore

REPO = Path(__file__).resolve().parents[3]


def test_a_helper_process_stores_what_waits_and_ends(home: tuple[Settings, LocalStore, str]) -> None:
    """``python -m phalanx.ingest --until-idle``: the standard library's sqlite3, every file, then
    it ends on its own once nothing is left."""
    settings, store, exp = home
    _report(settings, exp, writers=3, records=4)
    env = {**os.environ, "PHALANX_HOME": str(settings.home), "PYTHONPATH": str(REPO / "src")}
    done = subprocess.run(
        [sys.executable, "-m", "phalanx.ingest", "--spool", str(settings.spool_dir / exp), "--until-idle"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert _stored(store, exp) == {f"r{i}": list(range(2000)) for i in range(3)}
    assert "sqlalchemy" not in done.stderr.lower()


def test_an_ingester_behind_several_writers_starts_helpers_and_stops_them(
    home: tuple[Settings, LocalStore, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    settings, store, exp = home
    writers = _report(settings, exp, writers=3, records=6)
    helpers = Helpers(settings, settings.spool_dir / exp, claimed=True, most=2, start_bytes=1)
    ingester = Ingester(
        store, None, settings.spool_dir / exp, claimed=True, helpers=helpers, batch_bytes=4096
    )
    stop = threading.Event()
    started: list[int] = []
    grow = helpers.grow
    monkeypatch.setattr(helpers, "grow", lambda *a: (grow(*a), started.append(helpers.running)))
    thread = threading.Thread(target=ingester.run, args=(stop, 0.01))
    thread.start()
    for w in writers:
        assert w.wait_for_ack(timeout=120)
    stop.set()
    thread.join()
    assert max(started) >= 1  # three files waiting: helpers joined
    assert helpers.running == 0  # none outlives its ingester
    assert _stored(store, exp) == {f"r{i}": list(range(3000)) for i in range(3)}


def test_a_helper_that_cannot_help_is_not_started_again(tmp_path: Path) -> None:
    """No up-to-date SQLite file where the settings point: the helper says so and ends, and its
    ingester goes on alone rather than starting one per batch."""
    settings = Settings(home=tmp_path / "nothing-here", db_url=None, artifacts_url=None)
    spool = tmp_path / "spool"
    spool.mkdir()
    helpers = Helpers(settings, spool, claimed=False, most=2, start_bytes=1)
    helpers.grow(1 << 20, files=3)
    assert helpers.running == 2
    deadline = time.monotonic() + 120
    while helpers.running and time.monotonic() < deadline:
        time.sleep(0.05)
    helpers.grow(1 << 20, files=3)
    assert (helpers.most, helpers.running) == (0, 0)
