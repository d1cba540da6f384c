"""Helpers for tests that run real experiments with `phalanx run` on this machine.

Every experiment runs under the test's own PHALANX_HOME, so its processes can be found in /proc by
that value; teardown kills any that remain (and the test that cares asserts there were none).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.cli import Done, phalanx_cli

REPO = Path(__file__).resolve().parents[3]

PHALANX = [sys.executable, "-m", "phalanx.cli.main"]
DEADLINE = 90.0  # generous: two shared cores


def wait_for(condition: Callable[[], Any], timeout: float = DEADLINE, what: str = "condition") -> Any:
    """Poll until ``condition()`` is truthy; fail the test after ``timeout`` seconds."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def environ_of(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    out = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            out[key.decode(errors="replace")] = value.decode(errors="replace")
    return out


def experiment_pids(home: Path, experiment_id: str | None = None) -> list[int]:
    """Live processes of experiments under ``home`` (found by PHALANX_EXPERIMENT_ID in their environ)."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        env = environ_of(int(entry.name))
        if env.get("PHALANX_HOME") != str(home) or "PHALANX_EXPERIMENT_ID" not in env:
            continue
        if experiment_id and env["PHALANX_EXPERIMENT_ID"] != experiment_id:
            continue
        try:
            state = Path(f"/proc/{entry.name}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z":
            found.append(int(entry.name))
    return found


def replica_pid(home: Path, replica: str, marker: str) -> int | None:
    """The pid of the user's process (its cmdline contains ``marker``) inside ``replica``."""
    for pid in experiment_pids(home):
        if environ_of(pid).get("PHALANX_REPLICA") != replica:
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if marker in cmdline and "reaper" not in cmdline and not cmdline.startswith("/bin/sh"):
            return pid
    return None


class Phalanx:
    """Runs the CLI against one PHALANX_HOME."""

    def __init__(self, home: Path, tmp: Path) -> None:
        self.home = home
        self.tmp = tmp
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("PHALANX_")}
        self.env["PHALANX_HOME"] = str(home)
        # keep an existing PYTHONPATH (the GPU machine carries Phalanx's dependencies that way)
        self.env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
        self.started: list[subprocess.Popen[str]] = []

    def spec(self, text: str, name: str = "polyaxonfile.yml", folder: Path | None = None) -> Path:
        folder = folder or self.tmp / "exp"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / name
        path.write_text(textwrap.dedent(text))
        return path

    def run(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        """Run the CLI to its end; past ``timeout``, fail with its threads' stacks (SIGUSR1)."""
        proc = subprocess.Popen(
            [*PHALANX, *args],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=self.tmp,
        )
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGUSR1)  # `phalanx run` dumps every thread's stack on it
            time.sleep(2)
            proc.kill()
            out, err = proc.communicate()
            raise AssertionError(f"phalanx {' '.join(args)} hung; stderr:\n{err[-6000:]}") from None
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    def cli(self, *args: str | Path) -> Done:
        """`phalanx ARGS` in this process (tests/support/cli.py), in the environment and folder
        `run` gives its process: for a command that reads, refuses or stops, not one that runs an
        experiment or a group."""
        unset: dict[str, str | None] = {k: None for k in os.environ if k not in self.env}
        return phalanx_cli(*args, env={**unset, **self.env}, cwd=self.tmp)

    def start(self, *args: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [*PHALANX, *args],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=self.tmp,
        )
        self.started.append(proc)
        return proc

    def store(self) -> Any:
        from phalanx.config import Settings
        from phalanx.store import open_store

        return open_store(Settings(home=self.home))

    def only_experiment(self) -> Any:
        page = self.store().list_experiments()
        assert len(page.items) == 1, page.items
        return page.items[0]


def kill_started(cli: Phalanx) -> None:
    """Teardown: kill what a failed test left running of the commands it started."""
    for proc in cli.started:
        if proc.poll() is None:
            proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.communicate(timeout=30)


@pytest.fixture
def phalanx(phalanx_home: Path, tmp_path: Path) -> Iterator[Phalanx]:
    cli = Phalanx(phalanx_home, tmp_path)
    yield cli
    kill_started(cli)
    for pid in experiment_pids(phalanx_home):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
