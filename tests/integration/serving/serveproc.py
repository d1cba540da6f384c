"""A real `phalanx serve` process on a port it binds itself (``--port 0``): the address is read from
the ``serving ... at http://HOST:PORT`` line it prints once the model is loaded."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PHALANX = Path(sys.executable).parent / "phalanx"
START_SECONDS = 120  # imports and the first session on a loaded 2-core machine


@dataclass
class Served:
    url: str
    proc: subprocess.Popen[str]
    lines: list[str]
    token: str | None = None


def start_serve(home: Path, ref: str, *args: str, token: str | None = None) -> Served:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHALANX_")}
    env.update(PHALANX_HOME=str(home), PYTHONUNBUFFERED="1")
    argv = [str(PHALANX), "serve", ref, "--port", "0", *args]
    if "--track-seconds" not in args:  # no service experiment (and its ingester) unless asked
        argv += ["--track-seconds", "0"]
    argv += ["--token", token] if token else ["--no-auth"]
    proc = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    lines: list[str] = []
    found: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("serving "):
                found.put(line)
        found.put(None)

    threading.Thread(target=read, daemon=True).start()
    try:
        line = found.get(timeout=START_SECONDS)
    except queue.Empty:
        stop_serve(proc)
        raise AssertionError(
            f"phalanx serve printed no address in {START_SECONDS} s: {''.join(lines)}"
        ) from None
    if line is None:
        proc.wait(timeout=30)
        raise AssertionError(f"phalanx serve exited with {proc.returncode}: {''.join(lines)}")
    return Served(line.rsplit(" at ", 1)[1].strip(), proc, lines, token)


def stop_serve(proc: subprocess.Popen[str]) -> None:
    """SIGTERM (SIGKILL after 30 s), then wait for the ingester of its service experiment, which
    finishes its last passes after the server is gone (bounded)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    deadline = time.monotonic() + 60
    while _ingesters_following(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)


def _ingesters_following(pid: int) -> list[int]:
    wanted = f"--follow-pid\0{pid}\0".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if b"phalanx.ingest" in cmdline and wanted in cmdline:
                found.append(int(entry.name))
    return found


def post(
    served: Served,
    path: str,
    body: bytes,
    content_type: str = "application/json",
    accept: str = "application/json",
    token: str | None = None,
) -> tuple[int, dict[str, str], bytes]:
    headers = {"Content-Type": content_type, "Accept": accept}
    if token or served.token:
        headers["Authorization"] = f"Bearer {token or served.token}"
    request = urllib.request.Request(f"{served.url}{path}", data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return r.status, dict(r.headers.items()), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers.items()), e.read()


def get_json(served: Served, path: str) -> Any:
    headers = {"Authorization": f"Bearer {served.token}"} if served.token else {}
    request = urllib.request.Request(f"{served.url}{path}", headers=headers)
    with urllib.request.urlopen(request, timeout=60) as r:
        return json.load(r)
