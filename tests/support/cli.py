"""`phalanx ARGS` in this process: what a test of a CLI mistake or of a command's output needs (the
exit status, stdout, stderr), for about 0.01 CPU-s instead of the 0.45 CPU-s a `phalanx` process
costs to start (docs/testing.md, "The CLI in-process").

    done = phalanx_cli("check", "-f", path)                 # a Done, like subprocess.CompletedProcess
    assert done.returncode == 2 and "error:" in done.stderr

It calls the console entry point itself, ``phalanx.cli.main.main(args)``, so the lean dispatch,
the slips caught before Typer, Typer's own usage errors and the mapping of Phalanx errors to exit
statuses are the ones a user meets. What a command may leave behind in the process is put back
after each call: ``os.environ``, the working folder, the signal handlers, the root logger's
handlers and level, sys.stdin/stdout/stderr (``phalanx run`` wraps them in GuardedStreams).

What it does not prove, each command's real-process smoke does (one per entry point, kept in
tests/integration): the ``phalanx`` script, start-up imports, the fast exit of ``phalanx run``
(in-process it must not end pytest: ``_fast_exit`` is made a no-op, so the SystemExit goes on), and
anything a command does to its own process (signals from a terminal, a detached child: `run
--detach` starts its supervisor as a process here, where a real one forks it).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import signal
import sys
import tempfile
import traceback
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO
from unittest import mock

from phalanx.cli import main as cli_main

# The handlers a command may install (the supervisor's Ctrl-C and SIGTERM, a follower's SIGHUP).
_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


@dataclass(frozen=True)
class Done:
    """What `phalanx ARGS` ended with, shaped like subprocess.CompletedProcess[str]."""

    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


@contextlib.contextmanager
def _standard_streams(input: str) -> Iterator[tuple[BinaryIO, BinaryIO]]:
    """File descriptors 0, 1 and 2 on temporary files for the call, and sys.stdin/stdout/stderr
    on those descriptors, as a process started with pipes has them: not a terminal, with a real
    fileno (faulthandler, GuardedStream and the processes a command starts use it), and what a
    child process or the descriptor itself gets written lands in the same capture, in order."""
    saved = [os.dup(fd) for fd in (0, 1, 2)]
    files = [tempfile.TemporaryFile() for _ in range(3)]  # noqa: SIM115 (closed below)
    files[0].write(input.encode())
    files[0].seek(0)
    try:
        for fd, file in zip((0, 1, 2), files, strict=True):
            os.dup2(file.fileno(), fd)
        sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", write_through=True)
        sys.stderr = io.TextIOWrapper(
            io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="backslashreplace", write_through=True
        )
        yield files[1], files[2]
    finally:
        for fd, old in zip((0, 1, 2), saved, strict=True):
            os.dup2(old, fd)
            os.close(old)
        for file in files:
            file.close()


def _read(file: BinaryIO) -> str:
    file.seek(0)
    return file.read().decode("utf-8", errors="replace")


def _status(code: object) -> int:
    """The exit status the interpreter gives ``sys.exit(code)``."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    sys.stderr.write(f"{code}\n")  # sys.exit("message"): printed, status 1
    return 1


@contextlib.contextmanager
def _process_state_put_back(env: Mapping[str, str | None] | None, cwd: Path | str | None) -> Iterator[None]:
    environ = dict(os.environ)
    folder = os.getcwd()
    handlers = {sig: signal.getsignal(sig) for sig in _SIGNALS}
    root = logging.getLogger()
    root_handlers, root_level = list(root.handlers), root.level
    streams = sys.stdin, sys.stdout, sys.stderr  # `phalanx run` makes them GuardedStreams
    try:
        for name, value in (env or {}).items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        if cwd is not None:
            os.chdir(cwd)
        yield
    finally:
        sys.stdin, sys.stdout, sys.stderr = streams
        root.handlers[:] = root_handlers
        root.setLevel(root_level)
        for sig, handler in handlers.items():
            if handler is not None and signal.getsignal(sig) is not handler:
                signal.signal(sig, handler)
        os.chdir(folder)
        os.environ.clear()
        os.environ.update(environ)


def phalanx_cli(
    *args: str | Path,
    env: Mapping[str, str | None] | None = None,
    input: str = "",
    cwd: Path | str | None = None,
) -> Done:
    """Run `phalanx ARGS` in this process with ``env`` added to os.environ (a None value removes
    the variable) and ``input`` on stdin.
    An exception that escapes the entry point becomes what the interpreter would print (its
    traceback on stderr, status 1), so "no traceback" checks mean what they mean for a process."""
    argv = [str(a) for a in args]
    with (
        _process_state_put_back(env, cwd),
        mock.patch.object(cli_main, "_fast_exit", lambda code: None),
        # `run --detach` starts its supervisor as a process of its own here (Runner.start): a fork
        # would carry pytest and these patches into it; real processes prove the fork
        # (tests/integration/local/test_one_launch_path.py)
        mock.patch("phalanx.runner.running.can_fork", lambda: False),
        _standard_streams(input) as (out, err),
    ):
        try:
            cli_main.main(argv)
            status = 0
        except SystemExit as exc:
            status = _status(exc.code)
        except Exception:  # what a process would die of: the interpreter prints it, status 1
            sys.stderr.write(traceback.format_exc())
            status = 1
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(ValueError, OSError):
                stream.flush()
        return Done(tuple(argv), status, _read(out), _read(err))
