"""`phalanx tensorboard start` on this machine alone: a board of this machine's store, rendered into
a temporary folder, and TensorBoard on a loopback port in the foreground until Ctrl-C (or its end).
A server runs the same two parts as a service instead (phalanx.server.services)."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from phalanx.errors import UsageError
from phalanx.services.boards import Board
from phalanx.services.targets import Target
from phalanx.store.base import Store

REFRESH_SECONDS = 5.0
STOP_SECONDS = 30.0  # how long TensorBoard has to end after Ctrl-C before it is killed


def serve_board(store: Store, target: Target, port: int) -> int:
    """Run TensorBoard of ``target`` on 127.0.0.1:``port`` (0: any free one) until it ends or
    Ctrl-C; its exit status. TensorBoard prints where it answers on stderr."""
    folder = Path(tempfile.mkdtemp(prefix="phalanx-tensorboard-"))
    board = Board(store, target, folder)
    try:
        board.render()
        argv = [
            sys.executable,
            "-m",
            "phalanx.services.tensorboard",
            "--logdir",
            str(folder),
            "--port",
            str(port),
        ]
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL)  # it says where it answers
        stopped: list[int] = []

        def stop(signum: int, _frame: object) -> None:  # Ctrl-C, SIGTERM, SIGHUP: TensorBoard ends
            stopped.append(signum)
            process.terminate()

        for ending in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # never an exception mid-render
            if signal.getsignal(ending) is not signal.SIG_IGN:  # `... &` in a script ignores Ctrl-C
                signal.signal(ending, stop)
        try:
            while not stopped:
                try:
                    return process.wait(timeout=REFRESH_SECONDS)
                except subprocess.TimeoutExpired:
                    board.render()
            try:
                process.wait(timeout=STOP_SECONDS)
            except subprocess.TimeoutExpired:  # a TensorBoard that does not go: the stop still ends it
                process.kill()
                process.wait()
            return -stopped[0]
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    finally:
        board.close()
        shutil.rmtree(folder, ignore_errors=True)


def check_port(port: int) -> None:
    if not 0 <= port <= 65535:
        raise UsageError(f"--port {port}: a TCP port is 1 to 65535 (0: any free one)")
