"""Helpers for running a small experiment under `phalanx run` and reading what it stored."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from phalanx.config import Settings
from phalanx.ingest import Ingester
from phalanx.store import open_store
from phalanx.store.sql import SqlStore

PHALANX = Path(sys.executable).parent / "phalanx"
SRC = Path(__file__).resolve().parents[3] / "src"


def phalanx_run(home: Path, folder: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """`phalanx run -f folder/polyaxonfile.yml` with this tree's code, in its own PHALANX_HOME."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHALANX_")}
    env.update(PHALANX_HOME=str(home), PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH", "")) if p)
    return subprocess.run(
        [str(PHALANX), "run", "-f", str(folder / "polyaxonfile.yml"), *extra],
        env=env, cwd=folder, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def read_store(home: Path) -> SqlStore:
    store = open_store(Settings(home=home, db_url=None, artifacts_url=None))
    Ingester(store, None, home / "spool").run_once()  # whatever the detached ingester has not yet
    return store
