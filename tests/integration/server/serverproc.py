"""A real `phalanx server` subprocess on a free port, for the integration and browser tests."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.conftest import _processes_under

from phalanx.machine.ports import free_port

PHALANX = Path(sys.executable).parent / "phalanx"
# For a server whose jobs coordinate with the test through the test's own folders (a release file,
# a probe they append to): those are not in a box's view, so its jobs run as the server, unboxed.
# What the box does is tests/integration/isolation's subject.
TRUSTING = ["--trust-submitters"]


@dataclass
class Server:
    url: str
    home: Path
    proc: subprocess.Popen[bytes]
    token: str | None = None


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHALANX_")}
    env.update(PHALANX_HOME=str(home), PYTHONUNBUFFERED="1", **extra)
    return env


def start_server(
    home: Path,
    token: str | None = None,
    port: int | None = None,
    env: dict[str, str] | None = None,
    cpus: list[int] | None = None,
    args: list[str] | None = None,
    log_dir: Path | None = None,
) -> Server:
    """A server that answers /health. free_port's port is only free when it is picked: something
    (an outgoing connection's ephemeral port) can take it before the server binds, so a server that
    could not bind a port the test did not choose is started again on another one. ``cpus``: the
    server's CPU affinity, which the supervisors it starts inherit, so the machine's ledger sees
    only those cores (a machine of that size, whatever this one has). ``args``: more options of
    `phalanx server` (--trust-submitters). ``log_dir``: where its output goes (default: ``home``)."""
    for attempt in range(3):
        try:
            return _start_server(home, token, port or free_port(), env, cpus, args or [], log_dir or home)
        except _PortTaken:
            if port is not None or attempt == 2:
                raise
    raise AssertionError("unreachable")


class _PortTaken(RuntimeError):
    pass


def _start_server(
    home: Path,
    token: str | None,
    port: int,
    env: dict[str, str] | None,
    cpus: list[int] | None,
    more: list[str],
    logs: Path,
) -> Server:
    args = [str(PHALANX), "server", "--port", str(port), "--log-level", "warning", *more]
    if token:
        token_file = home / "server.token"
        token_file.write_text(token + "\n")
        args += ["--token-file", str(token_file)]
    log = open(logs / f"server-{port}.log", "wb")  # noqa: SIM115 (closed with the process)
    pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    proc = subprocess.Popen(
        args,
        env=clean_env(home, **(env or {})),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=pin,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log_text = (logs / f"server-{port}.log").read_text()
            taken = ("something else listens there", "address already in use")  # phalanx's check, uvicorn's
            failure = _PortTaken if any(t in log_text.lower() for t in taken) else RuntimeError
            raise failure(f"phalanx server exited with {proc.returncode}: {log_text}")
        try:
            with urllib.request.urlopen(f"{url}/api/v1/health", timeout=2) as r:
                if r.status == 200:
                    return Server(url, home, proc, token)
        except OSError:
            time.sleep(0.2)
    stop_server(proc)
    raise RuntimeError("phalanx server did not answer within 90 s")


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=15)


@contextlib.contextmanager
def running_server(home: Path, **options: Any) -> Iterator[Server]:
    """``start_server(home, **options)`` for the block (a module's shared server), stopped after it."""
    server = start_server(home, **options)
    try:
        yield server
    finally:
        stop_server(server.proc)


def wait_for(what: str, check: Callable[[], Any], seconds: float = 240) -> Any:
    """``check()``'s first true answer, polled; fails naming ``what`` after ``seconds``."""
    deadline = time.monotonic() + seconds
    while not (found := check()):
        assert time.monotonic() < deadline, f"not within {seconds:.0f} s: {what}"
        time.sleep(0.2)
    return found


def supervisors_gone(server: Server) -> None:
    """Every experiment's supervisor and group controller has exited (an ended experiment's
    supervisor still tidies up for a moment after its status is final): no process with the
    server's home but the server."""
    wait_for(
        "every supervisor and controller exited",
        lambda: (
            not [
                pid
                for pid, argv in _processes_under(server.home)
                if pid != server.proc.pid and "phalanx.services." not in argv  # its services are the server's
            ]
        ),
        120,
    )
