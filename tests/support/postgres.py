"""A real PostgreSQL server for tests: initdb in a temporary folder, started on a free loopback port,
stopped (and removed) at the end. PostgreSQL refuses to run as root, so as root it runs as the
``postgres`` user through runuser (see shared/notes/engines-on-this-machine.md).

``shared_postgres()`` starts one server per test process (stopped at exit); ``create_database()``
gives each test a fresh, empty database on it.
"""

from __future__ import annotations

import atexit
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from phalanx.machine.ports import free_port

_LOCK = threading.Lock()
_SHARED: PostgresServer | None = None


def _bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return candidates[-1] if candidates else None


def unavailable_reason() -> str | None:
    """Why a PostgreSQL server cannot be started here, or None if it can."""
    for name in ("initdb", "pg_ctl", "postgres"):
        if _bin(name) is None:
            return f"PostgreSQL is not installed ({name} not found); apt-get install postgresql"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no 'postgres' user to run PostgreSQL as"
        if shutil.which("runuser") is None:
            return "running as root and runuser is missing"
    return None


@dataclass
class PostgresServer:
    directory: Path
    port: int
    host: str = "127.0.0.1"
    user: str = "postgres"
    _stopped: bool = field(default=False, repr=False)
    _held: socket.socket | None = field(default=None, repr=False)  # its port while paused

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://{self.user}@{self.host}:{self.port}/{database}"

    def create_database(self, name: str | None = None) -> str:
        """A new empty database; returns its SQLAlchemy URL."""
        import psycopg

        name = name or f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(f"host={self.host} port={self.port} user={self.user} dbname=postgres") as conn:
            conn.autocommit = True
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        if self._held is not None:
            self._held.close()
            self._held = None
        _as_postgres([_bin_or("pg_ctl"), "-D", str(self.directory / "data"), "-m", "immediate", "-w", "stop"],
                     check=False)  # fmt: skip
        shutil.rmtree(self.directory, ignore_errors=True)


def _bin_or(name: str) -> str:
    path = _bin(name)
    if path is None:
        raise RuntimeError(f"{name} not found")
    return path


def _as_postgres(argv: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    if os.geteuid() == 0:
        argv = ["runuser", "-u", "postgres", "--", *argv]
    # without the PHALANX_* of the test that happened to start it: the shared server lives for the
    # session, and a PHALANX_HOME under a test's tmp_path would make it look like that test's leftover
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHALANX_")}
    return subprocess.run(argv, check=check, capture_output=True, text=True, timeout=120, env=env)


def start_postgres() -> PostgresServer:
    """initdb + start a server on a free port; RuntimeError with the server's log if it fails.
    free_port's port is only free when it is picked: another process of the machine (the other
    test worker's server or replica) may bind it before the postmaster does, so a start that
    could not bind is tried again on another port."""
    reason = unavailable_reason()
    if reason:
        raise RuntimeError(reason)
    directory = Path(tempfile.mkdtemp(prefix="phalanx-pg-", dir="/tmp"))
    if os.geteuid() == 0:
        pw = pwd.getpwnam("postgres")
        os.chown(directory, pw.pw_uid, pw.pw_gid)
    data = directory / "data"
    _as_postgres([_bin_or("initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8"])
    for attempt in range(3):
        port = free_port()
        started = _pg_start(directory, port)
        if started.returncode == 0:
            return PostgresServer(directory=directory, port=port)
        log = (directory / "log").read_text() if (directory / "log").exists() else ""
        if attempt < 2 and "could not bind" in log and "already in use" in log:
            (directory / "log").unlink()
            continue
        shutil.rmtree(directory, ignore_errors=True)
        raise RuntimeError(f"PostgreSQL did not start: {started.stderr}\n{log}")
    raise AssertionError("unreachable")


def _pg_start(directory: Path, port: int) -> subprocess.CompletedProcess[str]:
    options = f"-p {port} -k {directory} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=100"
    pg_ctl = _bin_or("pg_ctl")
    data, log = str(directory / "data"), str(directory / "log")
    return _as_postgres(
        [pg_ctl, "-D", data, "-l", log, "-o", options, "-w", "-t", "60", "start"], check=False
    )


def shared_postgres() -> PostgresServer:
    """One server per process, started on first use and stopped at interpreter exit."""
    global _SHARED
    with _LOCK:
        if _SHARED is None or _SHARED._stopped:
            _SHARED = start_postgres()
            atexit.register(_SHARED.stop)
        return _SHARED


def pause(server: PostgresServer) -> None:
    """Stop the server but keep its data (a database outage); ``resume`` starts it again. Its port
    stays taken meanwhile (bound, not listening: a client is refused as by a stopped server), or
    another process of the machine (the other test worker's ``free_port``) could take it, and the
    server could not come back on it."""
    _as_postgres([_bin_or("pg_ctl"), "-D", str(server.directory / "data"), "-m", "immediate", "-w", "stop"])
    held = socket.socket()
    held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # over its connections' TIME_WAIT
    held.bind((server.host, server.port))
    server._held = held


def resume(server: PostgresServer) -> None:
    """Start a paused server again, on the same port."""
    if server._held is not None:
        server._held.close()
        server._held = None
    started = _pg_start(server.directory, server.port)
    if started.returncode != 0:
        raise RuntimeError(f"PostgreSQL did not start again: {started.stderr}")
