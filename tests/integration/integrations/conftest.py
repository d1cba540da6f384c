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


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHALANX_")}
    env.update(PHALANX_HOME=str(home), PYTHONUNBUFFERED="1", **extra)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH", "")) if p)
    return env


def phalanx_run(home: Path, folder: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """`phalanx run -f folder/polyaxonfile.yml` with this tree's code, in its own PHALANX_HOME."""
    return subprocess.run(
        [str(PHALANX), "run", "-f", str(folder / "polyaxonfile.yml"), *extra],
        env=_env(home), cwd=folder, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def python_run(home: Path, script: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """A plain `python script.py` (no launcher: its Task.init creates the experiment)."""
    return subprocess.run(
        [sys.executable, str(script)],
        env=_env(home, **env), cwd=script.parent, capture_output=True, text=True, timeout=600,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


def read_store(home: Path) -> SqlStore:
    store = open_store(Settings(home=home, db_url=None, artifacts_url=None))
    Ingester(store, None, home / "spool").run_once()  # whatever the detached ingester has not yet
    return store


def wait_for_no_process_under(home: Path, timeout: float = 120.0) -> list[int]:
    """Wait (bounded) until no process runs with PHALANX_HOME=home: a plain script's detached
    ingester finishes on its own once the script has exited. Returns the pids still running."""
    import time

    needle = f"PHALANX_HOME={home}".encode()
    deadline = time.monotonic() + timeout
    while True:
        alive = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if needle in (entry / "environ").read_bytes().split(b"\0"):
                    alive.append(int(entry.name))
            except OSError:
                continue
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.2)
