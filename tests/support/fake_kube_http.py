"""FakeKubernetesServer: FakeKubernetesAPI behind the Kubernetes REST paths, over HTTP on 127.0.0.1.

A fake, like FakeKubernetesAPI, because no API server can run where Phalanx is built. It lets the
tests drive ``ClientAPI`` (the official ``kubernetes`` client: its request building, deserialization,
watch streaming, log streaming and ApiException handling) against the same simulated state, so the
adapter that talks to real clusters is exercised too. Only the paths the engines use are served.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from phalanx.backends.kube_api import KINDS, KubeError
from tests.support.fake_kube import FakeKubernetesAPI

_PLURAL_KIND = {plural: kind for kind, (_, _, plural) in KINDS.items()}
_PATH = re.compile(
    r"^/(?:api/v1|apis/(?P<group>[^/]+)/(?P<version>[^/]+))/namespaces/(?P<ns>[^/]+)/(?P<plural>[^/]+)"
    r"(?:/(?P<name>[^/]+))?(?:/(?P<sub>log))?$"
)


def _status(code: int, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "code": code}


class _Handler(BaseHTTPRequestHandler):
    api: FakeKubernetesAPI  # set on the subclass the server makes
    protocol_version = "HTTP/1.1"  # chunked streams, kept-alive connections, like the real server
    _payload = b""

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _send(self, code: int, doc: Any) -> None:
        body = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _stream(self, content_type: str, chunks: Iterator[bytes]) -> None:
        """Chunked, as the API server streams watches and logs: the client sees each line at once."""
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for chunk in chunks:
                self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client stopped reading
        self.close_connection = True

    def _body(self) -> Any:
        return json.loads(self._payload or b"{}")

    def _route(self, method: str) -> None:
        # read every request body (DELETE has one too), or it would corrupt the next kept-alive request
        self._payload = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        url = urlparse(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        m = _PATH.match(url.path)
        if not m or m["plural"] not in _PLURAL_KIND:
            self._send(404, _status(404, f"no route {url.path}"))
            return
        kind, ns, name = _PLURAL_KIND[m["plural"]], m["ns"], m["name"]
        try:
            self._dispatch(method, kind, ns, name, m["sub"], query)
        except KubeError as exc:
            self._send(exc.status, _status(exc.status, exc.message))

    def _dispatch(
        self, method: str, kind: str, ns: str, name: str | None, sub: str | None, query: dict[str, str]
    ) -> None:
        api = self.api
        if method == "POST" and name is None:
            self._send(201, api.create(ns, self._body()))
        elif method == "GET" and sub == "log" and name:
            follow = query.get("follow") in ("true", "True", "1")
            lines = api.pod_log(ns, name, follow)
            first = next(lines, None)  # raises KubeError (400/404) before the headers go out

            def chunks() -> Iterator[bytes]:
                if first is not None:
                    yield (first + "\n").encode()
                for line in lines:
                    yield (line + "\n").encode()

            self._stream("text/plain", chunks())
        elif method == "GET" and name:
            obj = api.get(ns, kind, name)
            if obj is None:
                raise KubeError(404, f'{kind.lower()}s "{name}" not found')
            self._send(200, obj)
        elif method == "GET" and kind == "Pod":
            selector = query.get("labelSelector", "")
            if query.get("watch") in ("true", "True", "1"):
                timeout = float(query.get("timeoutSeconds") or 60)
                events = api.watch_pods(ns, selector, timeout)
                self._stream(
                    "application/json",
                    (json.dumps({"type": t, "object": o}).encode() + b"\n" for t, o in events),
                )
            else:
                items = api.list_pods(ns, selector)
                self._send(200, {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items})
        elif method == "PATCH" and kind == "Pod" and name:
            self._send(200, api.patch_pod(ns, name, self._body()))
        elif method == "DELETE" and name:
            if not api.delete(ns, kind, name):
                raise KubeError(404, f'{kind.lower()}s "{name}" not found')
            self._send(200, {"kind": "Status", "apiVersion": "v1", "status": "Success"})
        else:
            self._send(405, _status(405, f"{method} not served by the fake"))

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def do_PATCH(self) -> None:
        self._route("PATCH")

    def do_DELETE(self) -> None:
        self._route("DELETE")


class FakeKubernetesServer:
    """Serves ``api`` on a free port; ``kubeconfig(path)`` writes a kubeconfig pointing at it."""

    def __init__(self, api: FakeKubernetesAPI | None = None) -> None:
        self.api = api or FakeKubernetesAPI()
        handler = type("Handler", (_Handler,), {"api": self.api})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        # polled every 50 ms for shutdown (the default, 0.5 s, made each test's end wait that long)
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)

    def kubeconfig(self, path: Path, context: str = "fake") -> Path:
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {"token": "fake-token"}}],
            "contexts": [{"name": context, "context": {"cluster": "fake", "user": "fake"}}],
            "current-context": context,
        }
        path.write_text(json.dumps(doc))
        return path

    def __enter__(self) -> FakeKubernetesServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=10)
