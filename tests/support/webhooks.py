"""A real webhook receiver: an HTTP server on loopback (port 0, so the kernel's free port is handed
over, never probed) in a thread, which records every POST and answers each with the next status of
its script (then 200)."""

from __future__ import annotations

import hashlib
import hmac
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType

from phalanx.server.hook_guard import HookGuard

# A receiver here listens on loopback, where a server sends hooks only when its admin allows it.
ALLOW_LOOPBACK = ["--hook-allow", "127.0.0.1"]
LOOPBACK = HookGuard.allowing(["127.0.0.1"])


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes

    def signed_by(self, secret: str) -> bool:
        """Whether ``X-Phalanx-Signature`` is the body's HMAC-SHA256 under ``secret``."""
        want = "sha256=" + hmac.new(secret.encode(), self.body, hashlib.sha256).hexdigest()
        return hmac.compare_digest(want, self.headers.get("x-phalanx-signature", ""))


class Receiver:
    """``with Receiver([500, 500]) as r: ... r.url ... r.wait_for(3)``."""

    def __init__(self, answers: Iterable[int] = ()) -> None:
        self.answers = list(answers)
        self.received: list[Received] = []
        self._changed = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with receiver._changed:
                    status = receiver.answers.pop(0) if receiver.answers else 200
                    headers = {k.lower(): v for k, v in self.headers.items()}
                    receiver.received.append(Received(self.path, headers, body))
                    receiver._changed.notify_all()
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                """Quiet: the test reads ``received``."""

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self._thread = threading.Thread(target=self.server.serve_forever, name="receiver", daemon=True)

    def __enter__(self) -> Receiver:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.server.shutdown()
        self.server.server_close()

    def wait_for(self, n: int, timeout: float = 120.0) -> list[Received]:
        """The first ``n`` POSTs, once they came (``timeout``: a safety net on a loaded machine)."""
        with self._changed:
            self._changed.wait_for(lambda: len(self.received) >= n, timeout)
            return list(self.received)
