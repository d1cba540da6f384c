"""`phalanx run` against a server with a token: each replica gets a token for its own experiment
only, and still reports everything through the server (issue #16)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.integration.server.serverproc import PHALANX, clean_env, start_server, stop_server

from phalanx.config import Settings
from phalanx.store import open_store

DATA = Path(__file__).parent / "data" / "scoped"


def test_replicas_report_with_a_token_that_writes_only_their_experiment(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    server = start_server(home, token="the-server-token")
    try:
        env = clean_env(home, PHALANX_HOST=server.url, PHALANX_TOKEN="the-server-token")
        done = subprocess.run(
            [str(PHALANX), "run", "-f", str(DATA / "scoped.yml"), "-o", "json"],
            env=env, capture_output=True, text=True, timeout=300, cwd=DATA,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        exp = json.loads(done.stdout)["id"]
        store = open_store(Settings(home=home))
        lines = [line.text for line in store.logs(exp) if line.text.startswith("{")]
        assert json.loads(lines[0]) == {"scoped": True, "list": "403"}
        assert store.metrics(exp)["loss"]["s"].values == [0.5]
        assert [a.name for a in store.artifacts(exp)] == ["cfg"]
        store.close()
    finally:
        stop_server(server.proc)


def test_sigterm_does_not_wait_for_open_consoles(tmp_path: Path) -> None:
    """A browser following a running experiment's console holds a stream open for ever; stopping
    the server must not wait for it (issue #16: it waited)."""
    import signal
    import time
    import urllib.request

    from phalanx.domain import ExperimentStatus

    home = tmp_path / "home"
    home.mkdir()
    store = open_store(Settings(home=home))
    e = store.create_experiment(name="live", project="p")
    store.update_experiment(e.id, status=ExperimentStatus.RUNNING, started_at=time.time())
    store.close()
    server = start_server(home)
    try:
        stream = urllib.request.urlopen(f"{server.url}/api/v1/experiments/{e.id}/logs/stream", timeout=30)
        assert stream.status == 200
        started = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        server.proc.wait(timeout=30)
        # the promise: the server's 3 s graceful bound, not the stream, ends it (generous: loaded cores)
        assert time.monotonic() - started < 25
        stream.close()
    finally:
        stop_server(server.proc)
