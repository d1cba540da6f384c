"""Run a script as a real process with its own PHALANX_HOME, then look at what reached the store:
the `sandbox` fixture of the SDK and durability tests (their conftest.py imports it)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from phalanx.config import Settings
from phalanx.ingest import Ingester
from phalanx.machine.procs import pid_alive
from phalanx.store import open_store
from phalanx.store.sql import SqlStore
from tests.support.cli import Done, phalanx_cli


@dataclass
class Sandbox:
    home: Path
    env: dict[str, str]
    started: list[subprocess.Popen[str]] = field(default_factory=list)

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

    def cli(self, *args: str) -> Done:
        """`phalanx ARGS` in this process (tests/support/cli.py), in this sandbox's environment."""
        unset: dict[str, str | None] = {k: None for k in os.environ if k not in self.env}
        return phalanx_cli(*args, env={**unset, **self.env}, cwd=self.home.parent)

    def popen(self, code: str, *args: str) -> subprocess.Popen[str]:
        path = self.script(code)
        proc = subprocess.Popen(
            [sys.executable, str(path), *args], env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, cwd=self.home.parent, start_new_session=True, preexec_fn=default_sigint,
        )  # fmt: skip
        self.started.append(proc)
        return proc

    def kill_leftovers(self) -> None:
        """At teardown: the scripts a test started (a failed test leaves them in time.sleep(600)),
        their process groups, and any process still running under this PHALANX_HOME (an ingester
        follows its script out, but not at once)."""
        for proc in self.started:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)  # start_new_session: its group is its pid
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.communicate(timeout=30)
        for pid in _pids_under(self.home):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

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


def default_sigint() -> None:
    """In the child before exec: SIGINT as a terminal's Ctrl-C finds it. A test run started in the
    background of a non-interactive shell (a CI step, `make test &`) has SIGINT ignored, children
    inherit that, Python then installs no KeyboardInterrupt handler, and a test's SIGINT is lost:
    test_sigterm_and_ctrl_c_... hung 120 s that way."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _pids_under(home: Path) -> list[int]:
    """Live processes (not zombies) whose environment names ``home`` as PHALANX_HOME."""
    wanted = f"PHALANX_HOME={home}".encode()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if wanted not in Path(f"/proc/{entry.name}/environ").read_bytes().split(b"\0"):
                continue
            if Path(f"/proc/{entry.name}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
        except (OSError, IndexError):
            continue
        found.append(int(entry.name))
    return found


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[Sandbox]:
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHALANX_")}
    env["PHALANX_HOME"] = str(home)
    env["PYTHONUNBUFFERED"] = "1"
    box = Sandbox(home=home, env=env)
    yield box
    box.kill_leftovers()
