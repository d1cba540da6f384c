"""Ingest with real processes: a writer process that exited, and an ingester SIGKILLed inside a
transaction (moved from tests/unit, which starts no process)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.unit.test_ingest import _points, _steps
from tests.unit.test_ingest import store as store  # the fixture: SQLite and PostgreSQL

from phalanx.config import Settings
from phalanx.ingest import Ingester
from phalanx.machine.procs import INGESTER_RECORD, recorded_process
from phalanx.readpass import open_for_reading, open_lean
from phalanx.spool import SpoolWriter
from phalanx.store import open_store
from phalanx.store.sql import SqlStore


def test_the_file_of_an_exited_writer_is_removed_once_ingested(store: SqlStore, tmp_path: Path) -> None:
    exp = store.create_experiment(name="a", project="p").id
    code = (
        "import sys; from phalanx.spool import SpoolWriter;"
        f"w = SpoolWriter(sys.argv[1], experiment_id={exp!r});"
        "w.write('param', {'values': {'a': 1}}); w.close(); print(w.stream)"
    )
    spool = tmp_path / "spool" / exp
    out = subprocess.run([sys.executable, "-c", code, str(spool)], capture_output=True, text=True, check=True)
    stream = out.stdout.strip()
    assert (spool / f"{stream}.spool").exists()
    ingester = Ingester(store, None, tmp_path / "spool")
    ingester.run_once()
    ingester.run_once()
    assert not (spool / f"{stream}.spool").exists()
    assert [p.key for p in store.params(exp)] == ["a"]


KILLED_IN_THIRD_BATCH = """
import os, signal, sys
from sqlalchemy import event
from sqlalchemy.engine import Engine
from phalanx.ingest import main
from phalanx.store.sql.store import SqlStore

calls = []
original = SqlStore.ingest_batch


def ingest_batch(self, *args, **kwargs):
    calls.append(1)
    return original(self, *args, **kwargs)


def commit(conn):
    if len(calls) == 3:  # the third batch is written, not yet committed
        os.kill(os.getpid(), signal.SIGKILL)


SqlStore.ingest_batch = ingest_batch
event.listen(Engine, "commit", commit)
sys.exit(main(sys.argv[1:]))
"""


def test_an_ingester_killed_mid_way_resumes_without_losing_or_repeating(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = {**os.environ, "PHALANX_HOME": str(home)}
    env.pop("PHALANX_DB_URL", None)
    from phalanx.config import Settings
    from phalanx.store import open_store

    store = open_store(Settings(home=home, db_url=None))
    exp = store.create_experiment(name="a", project="p").id
    w = SpoolWriter(home / "spool" / exp, experiment_id=exp)
    total = 0
    for b in range(200):
        w.write("scalar", _points(b * 2000, 2000))
        total += 2000
    w.sync()
    assert store.ingest_position(w.stream)[0] == 0
    cmd = [sys.executable, "-m", "phalanx.ingest", "--spool", str(home / "spool"), "--once"]
    # small transactions; the ingester SIGKILLs itself inside the third one, before its commit: the
    # kill lands mid-way however fast or loaded the machine is (no race with a polling test)
    killed = [sys.executable, "-c", KILLED_IN_THIRD_BATCH, *cmd[3:], "--batch-bytes", "200000"]
    proc = subprocess.Popen(killed, env=env)
    assert proc.wait(120) == -signal.SIGKILL
    assert 0 < store.ingest_position(w.stream)[0] < w.path.stat().st_size  # it did stop half-way
    subprocess.run(cmd, env=env, check=True, timeout=300)
    steps = _steps(store, exp)
    assert len(steps) == total and steps == list(range(total))


def test_a_followed_spool_is_left_to_its_ingester_and_read_once_it_is_killed(tmp_path: Path) -> None:
    """While a plain script's `python -m phalanx.ingest --follow-pid` runs, its folder is its own
    (runs/<id>/ingester.pid): `phalanx ls` stays on the lean path though the writer reports. Killed
    (SIGKILL: no clean-up), the folder is abandoned: the next read ingests what it left."""
    home = tmp_path / "home"
    env = {**os.environ, "PHALANX_HOME": str(home)}
    env.pop("PHALANX_DB_URL", None)
    settings = Settings(home=home, db_url=None, artifacts_url=None)
    store = open_store(settings)
    exp = store.create_experiment(name="a", project="p").id
    w = SpoolWriter(settings.spool_dir / exp, experiment_id=exp)  # this process: a live writer
    w.write("scalar", _points(0, 10))
    argv = [sys.executable, "-m", "phalanx.ingest", "--spool", str(settings.spool_dir / exp)]
    proc = subprocess.Popen([*argv, "--follow-pid", str(os.getpid()), "--interval", "0.05"], env=env)
    try:
        assert w.wait_for_ack(timeout=120, alive=lambda: proc.poll() is None)  # it follows the folder
        assert recorded_process(settings.runs_dir / exp / INGESTER_RECORD) == proc.pid
        w.write("scalar", _points(10, 10))  # ahead of the store: the follower's to ingest
        reader = open_lean(settings)
        assert reader is not None
        reader.close()
    finally:
        proc.kill()
        proc.wait(60)
    w.write("scalar", _points(20, 10))  # reported after its ingester died
    assert open_lean(settings) is None
    read, _ = open_for_reading(settings)
    try:
        assert _steps(read, exp) == list(range(30))  # nothing reported is lost
    finally:
        read.close()
        w.close()
        store.close()
