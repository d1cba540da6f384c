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

from phalanx.ingest import Ingester
from phalanx.spool import SpoolWriter
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
