"""A real S3 API on loopback for tests: moto's server in its own process, on a port the kernel picks.

``python -m tests.support.s3`` binds 127.0.0.1:0 (no probing of a "free" port: the server holds the
socket from the start), prints the port, and serves until killed. A thin WSGI layer in front of
moto records every request (method, path, query) and can fail the next N requests of a method with
a 503 SlowDown, so tests count GETs server-side and prove retries. ``S3Server`` starts it and talks
to that layer; ``s3_env`` is the environment a Phalanx process needs to use it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import urllib.request
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CONTROL = "/__phalanx_test__"
REPO = Path(__file__).resolve().parents[2]
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing-key-id",
    "AWS_SECRET_ACCESS_KEY": "testing-secret-never-shown",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def unavailable_reason() -> str | None:
    """Why the S3 server or client cannot run here, or None."""
    for module in ("moto", "flask", "s3fs"):
        try:
            __import__(module)
        except ImportError:
            return f"{module} is not installed (pip install 'phalanx[s3]' 'moto[server]')"
    return None


@dataclass
class S3Server:
    process: subprocess.Popen[str]
    port: int
    _stopped: bool = field(default=False, repr=False)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        """AWS variables that point botocore (and so s3fs) at this server, with dummy credentials."""
        return {**CREDENTIALS, "AWS_ENDPOINT_URL": self.endpoint}

    def create_bucket(self, name: str | None = None) -> str:
        name = name or f"b-{uuid.uuid4().hex[:12]}"
        request = urllib.request.Request(f"{self.endpoint}/{name}", method="PUT")
        with urllib.request.urlopen(request, timeout=30):
            pass
        return name

    def requests(self) -> list[dict[str, str]]:
        """Every S3 request served so far: {"method", "path", "query", "key"} (the access key id)."""
        with urllib.request.urlopen(f"{self.endpoint}{CONTROL}/requests", timeout=30) as r:
            found: list[dict[str, str]] = json.loads(r.read())
        return found

    def count(self, method: str, path_contains: str = "", query_has: str | None = None) -> int:
        return sum(
            1
            for r in self.requests()
            if r["method"] == method
            and path_contains in r["path"]
            and (query_has is None or query_has in r["query"])
        )

    def fail_next(self, method: str, times: int) -> None:
        """Answer the next ``times`` requests of ``method`` with 503 SlowDown (a transient error)."""
        body = json.dumps({"method": method, "times": times}).encode()
        request = urllib.request.Request(f"{self.endpoint}{CONTROL}/fail", data=body, method="POST")
        with urllib.request.urlopen(request, timeout=30):
            pass

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=20)


def start() -> S3Server:
    """Start a server; its port is known once it prints it (bounded wait: the process's first line)."""
    env = {**os.environ, **CREDENTIALS, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    # not a Phalanx process: a server shared by many tests (stopped at exit) is not one test's leftover
    env.pop("PHALANX_HOME", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.support.s3"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    line = ""
    timer = threading.Timer(120, process.kill)  # a server that never says its port is killed
    timer.start()
    try:
        assert process.stdout is not None
        line = process.stdout.readline().strip()
    finally:
        timer.cancel()
    if not line.isdigit():
        process.kill()
        process.wait(timeout=20)
        raise RuntimeError(f"the S3 test server did not start (it said {line!r})")
    return S3Server(process, int(line))


class _Recorder:
    """WSGI middleware in front of moto: logs requests, injects 503s, answers the control paths."""

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self.app = app
        self.lock = threading.Lock()
        self.log: list[dict[str, str]] = []
        self.failing: dict[str, int] = {}

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        method = environ.get("REQUEST_METHOD", "")
        if path.startswith(CONTROL):
            return self._control(path, environ, start_response)
        with self.lock:
            self.log.append(
                {
                    "method": method,
                    "path": path,
                    "query": environ.get("QUERY_STRING", ""),
                    "key": _key_id(environ),
                }
            )
            fail = self.failing.get(method, 0) > 0
            if fail:
                self.failing[method] -= 1
        if fail:
            body = b"<Error><Code>SlowDown</Code><Message>injected by the test</Message></Error>"
            stream = environ.get("wsgi.input")
            if stream is not None:  # drain the body so the client reads our answer
                length = int(environ.get("CONTENT_LENGTH") or 0)
                while length > 0:
                    chunk = stream.read(min(length, 1 << 20))
                    if not chunk:
                        break
                    length -= len(chunk)
            start_response("503 Slow Down", [("Content-Type", "application/xml")])
            return [body]
        return self.app(environ, start_response)

    def _control(
        self, path: str, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        if path.endswith("/fail"):
            length = int(environ.get("CONTENT_LENGTH") or 0)
            order = json.loads(environ["wsgi.input"].read(length))
            with self.lock:
                self.failing[order["method"]] = int(order["times"])
            body = b"{}"
        else:
            with self.lock:
                body = json.dumps(self.log).encode()
        start_response("200 OK", [("Content-Type", "application/json")])
        return [body]


def _key_id(environ: dict[str, Any]) -> str:
    """The access key id a request was signed with (SigV4's ``Credential=KEY/...``), "" if unsigned."""
    auth = environ.get("HTTP_AUTHORIZATION", "")
    return auth.split("Credential=", 1)[1].split("/", 1)[0] if "Credential=" in auth else ""


def _serve() -> None:
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import make_server

    app = _Recorder(DomainDispatcherApplication(create_backend_app))
    server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=MotoRequestHandler)
    print(server.server_port, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    _serve()
