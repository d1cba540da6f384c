"""Helpers for SDK tests: run a script as a real process with its own PHALANX_HOME, then look at
what reached the store."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from phalanx.config import Settings
from phalanx.ingest import Ingester
from phalanx.procs import pid_alive
from phalanx.store import open_store
from phalanx.store.sql import SqlStore


@dataclass
class Sandbox:
    home: Path
    env: dict[str, str]

    def script(self, code: str, name: str = "script.py") -> Path:
        path = self.home.parent / name
        path.write_text(textwrap.dedent(code))
        return path

    def run(
        self, code: str, *args: str, timeout: float = 180, **kw: object
    ) -> subprocess.CompletedProcess[str]:
        path = self.script(code)
        return subprocess.run(
            [sys.executable, str(path), *args], env=self.env, capture_output=True, text=True, timeout=timeout,
            cwd=self.home.parent, **kw,  # type: ignore[call-overload]
        )  # fmt: skip

    def popen(self, code: str, *args: str) -> subprocess.Popen[str]:
        path = self.script(code)
        return subprocess.Popen(
            [sys.executable, str(path), *args], env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, cwd=self.home.parent, start_new_session=True,
        )  # fmt: skip

    def store(self) -> SqlStore:
        return open_store(Settings(home=self.home, db_url=None, artifacts_url=None))

    def ingested(self) -> SqlStore:
        """The store after one ingest pass of everything spooled (as `phalanx` read commands do)."""
        store = self.store()
        Ingester(store, None, self.home / "spool").run_once()
        return store

    def only_experiment(self, store: SqlStore) -> str:
        items = store.list_experiments().items
        assert len(items) == 1, [e.id for e in items]
        return items[0].id


def wait_for(condition: Callable[[], bool], timeout: float = 120.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def wait_gone(pid: int, timeout: float = 60.0) -> None:
    wait_for(lambda: not pid_alive(pid), timeout, f"process {pid} to exit")


@pytest.fixture
def sandbox(tmp_path: Path) -> Sandbox:
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHALANX_")}
    env["PHALANX_HOME"] = str(home)
    env["PYTHONUNBUFFERED"] = "1"
    return Sandbox(home=home, env=env)
