"""The TensorBoard process of a service: ``python -m phalanx.services.tensorboard --logdir DIR
(--socket PATH | --port N) [--path-prefix /services/ID]``.

On a server it listens on a Unix socket in its service's folder (``--socket``), which only the
server's proxy connects to (phalanx.server.proxy): no TCP port is open, so nobody reaches it but
through ``/services/ID/`` and the project's roles. On this machine alone (`phalanx tensorboard
start`) it listens on a loopback port. It ends on SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import Any

from tensorboard import default, program  # the `tensorboard` extra
from werkzeug import serving


def _unix_server(socket_path: str) -> type[program.TensorBoardServer]:
    """A TensorBoard server class that listens on ``socket_path`` (werkzeug's ``unix://``)."""

    class UnixSocketServer(serving.ThreadedWSGIServer, program.TensorBoardServer):  # type: ignore[misc]
        def __init__(self, wsgi_app: Any, flags: Any) -> None:
            serving.ThreadedWSGIServer.__init__(self, f"unix://{socket_path}", 0, wsgi_app)
            self._prefix = flags.path_prefix or ""

        def get_url(self) -> str:
            return f"unix://{socket_path}{self._prefix}/"

    return UnixSocketServer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m phalanx.services.tensorboard")
    parser.add_argument("--logdir", required=True)
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--socket", help="listen on this Unix socket (a server's service)")
    where.add_argument("--port", type=int, help="listen on this loopback port")
    parser.add_argument("--path-prefix", default="")
    parser.add_argument("--reload-seconds", type=float, default=5.0)
    args = parser.parse_args(argv)
    flags = [
        "tensorboard",
        "--logdir",
        args.logdir,
        "--path_prefix",
        args.path_prefix,
        "--reload_interval",
        str(args.reload_seconds),
        "--load_fast",
        "false",  # the Rust data server is a second process listening on its own port: not that
    ]
    if args.port is not None:
        flags += ["--host", "127.0.0.1", "--port", str(args.port)]
    server_class = _unix_server(args.socket) if args.socket else None
    board = program.TensorBoard(plugins=default.get_plugins(), server_class=server_class)
    board.configure(argv=flags)
    try:
        url = board.launch()
    except program.TensorBoardServerException as exc:  # a port in use, a socket it cannot make
        print(f"error: TensorBoard cannot listen: {exc.msg}", file=sys.stderr, flush=True)
        return 2
    stops = "SIGTERM" if args.socket else "Ctrl-C"
    print(f"TensorBoard at {url} ({stops} stops it)", file=sys.stderr, flush=True)
    ended = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: ended.set())
    ended.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
