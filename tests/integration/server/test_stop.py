"""POST /experiments/{id}/stop on a real `phalanx run`: its supervisor stops every replica and marks the
experiment stopped; `phalanx run` exits 130 and no replica survives."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

from tests.integration.server.serverproc import PHALANX, clean_env, start_server, stop_server

SLEEPY = Path(__file__).parent / "data" / "sleepy.yml"


def api(url: str, method: str = "GET") -> Any:
    req = urllib.request.Request(url, method=method)
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.load(r)


def _ended(pid: int) -> bool:
    """Gone, or a zombie not yet reaped by init. One read, no exists() first: a zombie reaped
    between the two looks raised FileNotFoundError. (procs.pid_alive has the same gap the other
    way: reaped between its kill(0) and its read of /proc/<pid>/stat, it answers alive.)"""
    try:
        return "zombie" in Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return True


def test_stop_through_the_api_stops_a_running_experiment(phalanx_home: Path) -> None:
    server = start_server(phalanx_home)
    run = subprocess.Popen(
        [str(PHALANX), "run", "-f", str(SLEEPY)],
        env=clean_env(phalanx_home),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        exp: dict[str, Any] = {}
        while time.monotonic() < deadline:
            items = api(f"{server.url}/api/v1/experiments")["items"]
            if items and items[0]["status"] == "running":
                exp = items[0]
                replicas = api(f"{server.url}/api/v1/experiments/{exp['id']}/replicas")
                if all(r["state"] == "running" for r in replicas):
                    break
            time.sleep(0.2)
        assert exp, "the experiment never ran"
        pids = [r["pid"] for r in api(f"{server.url}/api/v1/experiments/{exp['id']}/replicas")]
        answer = api(f"{server.url}/api/v1/experiments/{exp['id']}/stop", method="POST")
        assert answer["stop_requested"] is True
        assert run.wait(timeout=120) == 130
        final = api(f"{server.url}/api/v1/experiments/{exp['id']}")
        assert final["status"] == "stopped"
        for pid in pids:
            assert isinstance(pid, int)
            assert _ended(pid), f"replica process {pid} survived the stop"
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
        stop_server(server.proc)
