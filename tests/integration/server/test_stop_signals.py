"""Stop signals only the processes Phalanx itself recorded (issue #16): a pid named through ingest is
never signalled, and a recorded script pid is signalled only while its start time matches. Real
processes stand in as the victims, so these run here rather than in tests/unit/server/test_security.py."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from tests.unit.server.test_security import _script_experiment

from phalanx.config import Settings
from phalanx.domain import ExperimentStatus
from phalanx.machine.procs import record_process
from phalanx.server.app import create_app
from phalanx.server.settings import ServerSettings
from phalanx.store import open_store
from phalanx.store.base import Store
from phalanx.supervisor.stopping import pid_alive


@pytest.fixture
def settings(phalanx_home: Path) -> ServerSettings:
    return ServerSettings(store=Settings(home=phalanx_home), poll_seconds=0.05, allowed_hosts=["testserver"])


@pytest.fixture
def store(settings: ServerSettings) -> Iterator[Store]:
    s = open_store(settings.store)
    yield s
    s.close()


@pytest.fixture
def client(settings: ServerSettings, store: Store) -> Iterator[TestClient]:
    with TestClient(create_app(settings, store)) as c:
        yield c


@pytest.fixture
def victim() -> Iterator[subprocess.Popen[bytes]]:
    """A process of the server's user that nobody asked to stop."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield proc
    proc.kill()
    proc.wait(10)


# A process that reports every signal it receives, in order, on its stdout. All signals are blocked
# and taken with sigwaitinfo, which hands out standard signals (1-31) before real-time ones: once it
# reports SENTINEL (real-time, sent by the test last), a signal sent before it has been reported too.
SENTINEL = signal.SIGRTMIN + 1
WITNESS = f"""
import signal, sys
every = set(signal.valid_signals()) - {{signal.SIGKILL, signal.SIGSTOP}}
signal.pthread_sigmask(signal.SIG_BLOCK, every)
print("ready", flush=True)
while True:
    got = signal.sigwaitinfo(every).si_signo
    print(got, flush=True)
    if got != {int(SENTINEL)}:
        sys.exit(1)
"""


@pytest.fixture
def witness() -> Iterator[subprocess.Popen[str]]:
    """A process of the server's user that nobody asked to stop, and that tells what it received."""
    proc = subprocess.Popen([sys.executable, "-c", WITNESS], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    yield proc
    proc.kill()
    proc.wait(10)


def signals_received(proc: subprocess.Popen[str]) -> list[str]:
    """Every signal ``proc`` received before the sentinel sent now (SIGKILL: it is gone, ``[]``
    cannot be returned then since the sentinel's line never comes)."""
    assert proc.stdout is not None
    proc.send_signal(SENTINEL)
    lines = []
    while (line := proc.stdout.readline()) not in ("", f"{int(SENTINEL)}\n"):
        lines.append(line.strip())
    assert line, f"the process ended (killed?) after receiving {lines}"
    return lines


def test_stop_never_signals_a_pid_that_came_through_ingest(
    client: TestClient, store: Store, witness: subprocess.Popen[str]
) -> None:
    victim = witness
    _script_experiment(client, "attack1", victim.pid)
    # claiming an engine does not help either: the backend is always "script", no handle
    _script_experiment(client, "attack2", victim.pid, backend="local")
    assert store.get_experiment("attack2").backend == "script"
    assert store.get_experiment("attack2").handle is None
    for exp in ("attack1", "attack2"):
        r = client.post(f"/api/v1/experiments/{exp}/stop")
        assert r.status_code == 200, r.text
        assert store.get_experiment(exp).status is ExperimentStatus.STOPPED
    assert signals_received(victim) == []  # no sleep: whatever stop sent, it has come by now
    assert victim.poll() is None and pid_alive(victim.pid)


def test_stop_signals_the_script_process_recorded_under_runs_with_its_start_time(
    client: TestClient, store: Store, settings: ServerSettings, victim: subprocess.Popen[bytes]
) -> None:
    _script_experiment(client, "legit1", victim.pid)
    record_process(settings.store.runs_dir / "legit1" / "script.pid", victim.pid)
    # a record whose start time does not match (a reused pid) is ignored
    stale = settings.store.runs_dir / "stale1" / "script.pid"
    _script_experiment(client, "stale1", victim.pid)
    stale.parent.mkdir(parents=True)
    stale.write_text(f"{victim.pid} 1\n")
    client.post("/api/v1/experiments/stale1/stop")
    assert victim.poll() is None
    client.post("/api/v1/experiments/legit1/stop")
    assert victim.wait(10) is not None
