"""Several processes opening the same new SQLite store at once (a test thread beside a supervisor,
`phalanx run -d` twice): switching the file to WAL needs an exclusive lock, and one opener got
"database is locked" while another created or migrated it (CI, under load: the 120 s busy timeout
was set only after the WAL switch, which waited python's 5 s default). A guard: on an idle machine
the old code passed it too."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

OPEN = """
import sys
from phalanx.config import Settings
from phalanx.store import open_store
store = open_store(Settings(home=sys.argv[1]))
store.create_experiment(name="e", project="p")
store.close()
"""


def test_processes_opening_a_new_store_together_all_get_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    procs = [
        subprocess.Popen([sys.executable, "-c", OPEN, str(home)], stderr=subprocess.PIPE, text=True)
        for _ in range(6)
    ]
    errors = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * 6, errors
    from phalanx.config import Settings
    from phalanx.store import open_store

    assert open_store(Settings(home=home)).list_experiments().total == 6


def test_the_wal_switch_waits_for_a_writer_of_the_new_file_instead_of_failing(tmp_path: Path) -> None:
    """SQLite runs no busy handler for ``PRAGMA journal_mode=WAL``: while another connection holds
    the write lock of a file still in rollback mode (another opener switching it, or creating the
    tables), the switch failed at once with "database is locked" whatever the busy timeout (CI, two
    `phalanx run` on a fresh home). The engine now waits for the lock, within the busy timeout."""
    import sqlite3
    import threading

    from sqlalchemy import text

    from phalanx.store.sql.engine import make_engine

    path = tmp_path / "phalanx.db"
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")  # the write lock, in rollback mode
    other.execute("CREATE TABLE t (x INTEGER)")
    done = threading.Timer(0.5, lambda: other.execute("COMMIT"))
    done.start()
    try:
        engine = make_engine(f"sqlite:///{path}")
        with engine.connect() as conn:
            assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
            assert conn.execute(text("SELECT count(*) FROM t")).scalar() == 0  # after the commit
        engine.dispose()
    finally:
        done.join()
        other.close()
