"""A supervisor's ingester that falls behind several replicas starts helper processes
(``phalanx.ingest_helpers``, issue 42): each stores what waits, through the standard library's
sqlite3, and ends once little is left or when its ingester stops; every record is stored once."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from tests.unit.test_ingest_sharing import _report, _stored
from tests.unit.test_ingest_sharing import home as home  # the fixture: a store and an experiment

from phalanx import ingest_helpers
from phalanx.config import Settings
from phalanx.ingest import Ingester
from phalanx.ingest_helpers import Helpers
from phalanx.store.base import LocalStore

REPO = Path(__file__).resolve().parents[3]


def _helper(settings: Settings, spool: Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m phalanx.ingest --until-idle`` as a helper's life runs it; prints whether it
    imported SQLAlchemy."""
    code = (
        "import runpy, sys\n"
        f"sys.argv = ['phalanx.ingest', '--spool', {str(spool)!r}, '--until-idle']\n"
        "try:\n    runpy.run_module('phalanx.ingest', run_name='__main__')\n"
        "except SystemExit as end:\n    code = end.code\n"
        "print('sqlalchemy' in sys.modules)\nsys.exit(code)\n"
    )
    env = {**os.environ, "PHALANX_HOME": str(settings.home), "PYTHONPATH": str(REPO / "src")}
    return subprocess.run(
        [sys.executable, "-P", "-c", code], env=env, cwd=cwd, capture_output=True, text=True, timeout=120
    )


def test_a_helper_process_stores_what_waits_and_ends(home: tuple[Settings, LocalStore, str]) -> None:
    """The standard library's sqlite3 (no SQLAlchemy), every file, then it ends on its own once
    nothing is left."""
    settings, store, exp = home
    _report(settings, exp, writers=3, records=4)
    done = _helper(settings, settings.spool_dir / exp)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
    assert _stored(store, exp) == {f"r{i}": list(range(2000)) for i in range(3)}


def test_a_helper_ends_beside_a_record_still_being_written(home: tuple[Settings, LocalStore, str]) -> None:
    """More than STOP_BYTES of one record not yet ended (a writer in the middle of a huge line):
    nothing for a helper to take, so it ends after about a second rather than polling on."""
    settings, store, exp = home
    (w,) = _report(settings, exp, writers=1, records=1)
    with open(w.path, "ab") as spool:
        spool.write(b'{"kind": "log", "data": {"lines": ["' + b"x" * (2 << 20))
    done = _helper(settings, settings.spool_dir / exp)
    assert done.returncode == 0, done.stderr
    assert _stored(store, exp) == {"r0": list(range(500))}


def test_a_helper_whose_batches_fail_ends_instead_of_trying_forever(
    home: tuple[Settings, LocalStore, str],
) -> None:
    """A database that refuses every batch (here: its positions' table gone) ends the helper with
    status 1 after one pass, saying why (its ingester then starts none again: ``Helpers.grow``)."""
    settings, _, exp = home
    _report(settings, exp, writers=2, records=2)
    conn = sqlite3.connect(settings.home / "phalanx.db")
    conn.execute("DROP TABLE ingest_positions")
    conn.commit()
    conn.close()
    done = _helper(settings, settings.spool_dir / exp)
    assert done.returncode == 1
    assert "this helper ends" in done.stderr


def _started(monkeypatch: pytest.MonkeyPatch) -> list[subprocess.Popen[bytes]]:
    """Every helper process started from now on."""
    started: list[subprocess.Popen[bytes]] = []
    popen = subprocess.Popen

    def recorded(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        started.append(popen(*args, **kwargs))
        return started[-1]

    monkeypatch.setattr(ingest_helpers.subprocess, "Popen", recorded)
    return started


def test_an_ingester_behind_several_writers_starts_helpers_and_stops_them(
    home: tuple[Settings, LocalStore, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    settings, store, exp = home
    processes = _started(monkeypatch)
    writers = _report(settings, exp, writers=3, records=6)
    log_path = settings.home / "helpers.log"
    helpers = Helpers(settings, settings.spool_dir / exp, log_path, claimed=True, most=2, start_bytes=1)
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
    assert all(p.poll() is not None for p in processes)  # none outlives its ingester
    assert _stored(store, exp) == {f"r{i}": list(range(3000)) for i in range(3)}


def test_helpers_are_stopped_before_the_last_pass_and_none_starts_in_it(
    home: tuple[Settings, LocalStore, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stopped while a flood still waits: the helpers are ended, the last pass stores the rest
    without starting new ones, and every record is stored once."""
    settings, store, exp = home
    processes = _started(monkeypatch)
    writers = _report(settings, exp, writers=3, records=40)
    helpers = Helpers(
        settings, settings.spool_dir / exp, settings.home / "helpers.log", claimed=True, most=2, start_bytes=1
    )
    ingester = Ingester(
        store, None, settings.spool_dir / exp, claimed=True, helpers=helpers, batch_bytes=4096
    )
    stop = threading.Event()
    thread = threading.Thread(target=ingester.run, args=(stop, 0.01))
    thread.start()
    deadline = time.monotonic() + 120
    while helpers.running == 0 and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert helpers.running >= 1
    stop.set()
    thread.join()
    running = len(processes)
    assert all(p.poll() is not None for p in processes) and helpers.most == 0
    assert len(processes) == running  # the last pass started none
    assert _stored(store, exp) == {f"r{i}": list(range(20_000)) for i in range(3)}
    assert all(w.acked() == 39 for w in writers)


def test_a_helper_runs_no_module_of_the_supervisors_folder(
    home: tuple[Settings, LocalStore, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hostile job's bundle is a server supervisor's working folder: a ``json.py`` planted there
    (or in the home) is never imported by a helper, which runs in the server's account."""
    settings, store, exp = home
    _report(settings, exp, writers=3, records=2)
    marker = tmp_path / "pwned"
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    for folder in (bundle, settings.home):
        (folder / "json.py").write_text(f"open({str(marker)!r}, 'w').write('imported')\n")
    monkeypatch.chdir(bundle)
    helpers = Helpers(
        settings, settings.spool_dir / exp, tmp_path / "helpers.log", claimed=True, most=1, start_bytes=1
    )
    helpers.grow(1 << 20, files=3)
    assert helpers.running == 1
    deadline = time.monotonic() + 120
    while helpers.running and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not marker.exists()
    assert _stored(store, exp) == {f"r{i}": list(range(1000)) for i in range(3)}  # it did its work


def test_a_helper_that_cannot_help_is_not_started_again(tmp_path: Path) -> None:
    """No up-to-date SQLite file where the settings point: the helper says so and ends, and its
    ingester goes on alone rather than starting one per batch."""
    settings = Settings(home=tmp_path / "nothing-here", db_url=None, artifacts_url=None)
    settings.home.mkdir()
    spool = tmp_path / "spool"
    spool.mkdir()
    helpers = Helpers(settings, spool, tmp_path / "helpers.log", claimed=False, most=2, start_bytes=1)
    helpers.grow(1 << 20, files=3)
    assert helpers.running == 2
    deadline = time.monotonic() + 120
    while helpers.running and time.monotonic() < deadline:
        time.sleep(0.05)
    helpers.grow(1 << 20, files=3)
    assert (helpers.most, helpers.running) == (0, 0)
    assert "ingesting alone" not in (tmp_path / "helpers.log").read_text()  # the helpers' own words only
