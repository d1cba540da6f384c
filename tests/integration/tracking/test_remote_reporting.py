"""Remote mode: a replica with PHALANX_HOST ships its spool to a real `phalanx server` over HTTP, and
keeps it (re-sending) while the server is down."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from phalanx.config import Settings
from phalanx.domain import ExperimentStatus
from phalanx.machine.ports import free_port
from phalanx.store import open_store

PHALANX = Path(sys.executable).parent / "phalanx"
TOKEN = "s3cret-token"


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHALANX_")}
    env.update(PHALANX_HOME=str(home), PYTHONUNBUFFERED="1", **extra)
    return env


class ServerProcess:
    def __init__(self, home: Path, port: int) -> None:
        self.home, self.port, self.url = home, port, f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        (self.home / "token").write_text(TOKEN)
        log = open(self.home / "server.log", "ab")  # noqa: SIM115 (lives as long as the server)
        self.proc = subprocess.Popen(
            [str(PHALANX), "server", "--port", str(self.port), "--log-level", "warning",
             "--token-file", str(self.home / "token")],
            env=_env(self.home), stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, (self.home / "server.log").read_text()
            try:
                with urllib.request.urlopen(f"{self.url}/api/v1/health", timeout=2):
                    return
            except OSError:
                time.sleep(0.2)
        raise AssertionError("phalanx server did not answer within 120 s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(30)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    home = tmp_path / "server-home"
    home.mkdir()
    srv = ServerProcess(home, free_port())
    yield srv
    srv.stop()


SCRIPT = """
import pathlib, sys
from phalanx import Task
task = Task.init("remote", "over http")
logger = task.get_logger()
for i in range(5000):
    logger.report_scalar("loss", "master", 1.0 / (i + 1), i)
task.connect({"lr": 0.1})
pathlib.Path("out").mkdir(exist_ok=True); pathlib.Path("out/a.txt").write_text("aaa")
task.upload_artifact("cfg", {"remote": True})
task.upload_artifact("outputs", "out")
print("printed remotely")
if len(sys.argv) > 1:                 # the server is not up yet
    print("FIRST", task.flush(timeout=2), flush=True)
    go = pathlib.Path(sys.argv[1])
    while not go.exists():
        import time; time.sleep(0.05)
print("FLUSHED", task.flush(timeout=120), task.id, flush=True)
"""


def _run_client(tmp_path: Path, server: ServerProcess, *args: str) -> subprocess.Popen[str]:
    client_home = tmp_path / "client-home"  # nothing is shared with the server but HTTP
    client_home.mkdir(exist_ok=True)
    script = tmp_path / "remote.py"
    script.write_text(textwrap.dedent(SCRIPT))
    env = _env(client_home, PHALANX_HOST=server.url, PHALANX_TOKEN=TOKEN)
    return subprocess.Popen(
        [sys.executable, str(script), *args], env=env, cwd=tmp_path, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip


def _check_server_store(server: ServerProcess, exp_id: str) -> None:
    store = open_store(Settings(home=server.home, db_url=None, artifacts_url=None))
    deadline = time.monotonic() + 120  # the STATUS event is shipped as the script exits
    while store.get_experiment(exp_id).status != ExperimentStatus.SUCCEEDED:
        assert time.monotonic() < deadline, store.get_experiment(exp_id)
        time.sleep(0.1)
    assert store.metrics(exp_id)["loss"]["master"].steps == list(range(5000))
    assert [(p.key, p.value) for p in store.params(exp_id)] == [("lr", 0.1)]
    files = store.artifact_store
    assert files is not None
    artifacts = {a.name: a for a in store.artifacts(exp_id)}
    assert files.read_bytes(exp_id, artifacts["cfg"].path) == b'{\n  "remote": true\n}'
    assert artifacts["outputs"].path.endswith("/outputs/out")  # a folder: artifacts/<writer>/outputs/out
    assert files.read_bytes(exp_id, f"{artifacts['outputs'].path}/a.txt") == b"aaa"
    assert "printed remotely" in {line.text for line in store.logs(exp_id)}


def test_reports_wait_in_the_spool_while_the_server_is_down_then_a_script_reports_everything_over_http(
    server: ServerProcess, tmp_path: Path
) -> None:
    """Two clients of one server (a `phalanx server` start costs seconds): the first reports while
    the server is down and its spool waits; once the server is up, both ship everything."""
    go = tmp_path / "go"
    proc = _run_client(tmp_path, server, str(go))
    assert proc.stdout is not None
    lines = []
    while not any(line.startswith("FIRST") for line in lines):
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.stderr else ""
        lines.append(line)
    assert lines[-1].split() == ["FIRST", "False"]  # nothing can be acknowledged yet
    server.start()
    go.touch()
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    _, ok, exp_id = out.strip().splitlines()[-1].split()
    assert ok == "True"
    _check_server_store(server, exp_id)

    # a script started while the server is up reports everything, and keeps nothing of its own
    proc = _run_client(tmp_path, server)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    _, ok, second = out.strip().splitlines()[-1].split()
    assert ok == "True" and second != exp_id
    _check_server_store(server, second)
    assert not (tmp_path / "client-home" / "phalanx.db").exists()
