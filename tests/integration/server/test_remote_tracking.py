"""Remote tracking: a script reports through `phalanx server` (PHALANX_HOST + PHALANX_TOKEN), the
server is stopped in the middle of the run and started again, and every point arrives exactly once,
because the SDK's spool is its write-ahead log and ingest is idempotent on (stream, seq)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.integration.server.serverproc import clean_env, start_server, stop_server

from phalanx.config import Settings
from phalanx.store import open_store

SCRIPT = Path(__file__).parent / "data" / "remote_reporter.py"
POINTS = 2000


def wait_for(path: Path, proc: subprocess.Popen[str], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the reporting script exited ({proc.returncode}) before {path.name}:\n{out}\n{err}")
        if time.monotonic() > deadline:
            pytest.fail(f"no {path.name} within {timeout} s")
        time.sleep(0.05)


def test_every_point_arrives_exactly_once_across_a_server_restart(tmp_path: Path) -> None:
    server_home, client_home, marks = tmp_path / "server", tmp_path / "client", tmp_path / "marks"
    for d in (server_home, client_home, marks):
        d.mkdir()
    server = start_server(server_home, token="remote-token")
    port = server.url.rsplit(":", 1)[1]
    env = clean_env(client_home, PHALANX_HOST=server.url, PHALANX_TOKEN="remote-token")
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), str(marks), str(POINTS)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        wait_for(marks / "half", proc)
        stop_server(server.proc)
        (marks / "server-down").touch()
        wait_for(marks / "reported", proc)
        server = start_server(server_home, token="remote-token", port=int(port))
        (marks / "server-up").touch()
        wait_for(marks / "closed", proc)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        stop_server(server.proc)
    experiment_id = (marks / "id").read_text()
    store = open_store(Settings(home=server_home))
    try:
        series = store.metrics(experiment_id, "loss")["loss"]["worker 00"]
        assert series.steps == list(range(POINTS))
        assert series.values == [1.0 / (i + 1) for i in range(POINTS)]
        assert store.get_experiment(experiment_id).name == "server restart"
        # what the plain script ran reached the server too, its snapshot in the server's artifacts
        record = store.repro(experiment_id)
        assert record["packages"] and record["script"]["command"][1] == str(SCRIPT)
        assert store.artifact_store is not None
        assert store.artifact_store.exists(experiment_id, record["snapshot"]["path"])
    finally:
        store.close()
    assert not (client_home / "phalanx.db").exists()  # nothing went to a local store
