"""A process forked from this one and set apart as if it had been started anew: no Python start-up,
no import done twice (issue 42). Two use it: a detached supervisor forked from `phalanx run
--detach` or a group's controller (runner.forking), and a replica's reaper forked from its
supervisor (``backends.local.reaper.fork``, through ``backends.local.leaders``).

Only for a single-threaded process (``can_fork``): a fork copies the calling thread alone, and a
lock another thread held would never be released in the child. The child (``fork_apart``) starts
its own session, is titled for `ps`, drops a Ctrl-C or SIGTERM meant for its parent's process
group that landed during the fork, holds only the standard streams it was handed and the fds its
caller says it keeps, and never returns into its parent's code: its caller ends it with
``os._exit``.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import subprocess
import sys
import threading
import time

TYPE_CHECKING = False  # without importing typing: a replica's reaper (started, not forked) imports this
if TYPE_CHECKING:
    from typing import Any, Protocol

    class ChildProcess(Protocol):
        """A process this one started, as it holds it: a ``subprocess.Popen`` or a ``Forked``."""

        pid: int
        returncode: int | None
        args: Any  # what runs: ``Popen.args``, or ["fork", PID]

        def poll(self) -> int | None: ...

        def wait(self, timeout: float | None = None) -> int: ...

        def terminate(self) -> None: ...


STOPPING = (signal.SIGINT, signal.SIGTERM)


def can_fork() -> bool:
    """Whether this process may fork a child that runs Python: POSIX, and no other thread runs."""
    return hasattr(os, "fork") and threading.active_count() == 1


class Forked:
    """A forked child as its parent holds it: ``pid``, ``poll()``, ``wait()``, ``terminate()`` and
    ``returncode`` as ``subprocess.Popen`` has them (callers treat both alike)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self.args = ["fork", str(pid)]

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped by someone else: it ended, how is unknown
                self.returncode = 1
            else:
                if pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def terminate(self) -> None:
        """SIGTERM, as Popen.terminate."""
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGTERM)

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            time.sleep(0.05)
        return code


def _fds_beyond_stderr() -> list[int] | None:
    """The fds this process holds beyond stderr, as /proc/self/fd lists them (None: no /proc)."""
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return None
    return [fd for fd in map(int, names) if fd > 2]


def close_inherited() -> None:
    """Close every inheritable fd beyond stderr: the ones this process was handed by whatever started
    it (Python opens its own non-inheritable, PEP 446), such as the write end of a pipe a caller
    reads to its end (`id=$(phalanx run --detach ... 3>&1)`). Without /proc (not Linux): left."""
    for fd in _fds_beyond_stderr() or ():
        with contextlib.suppress(OSError):  # the listing's own fd, already closed
            if os.get_inheritable(fd):
                os.close(fd)


def close_all() -> None:
    """Close every fd beyond stderr, those that /proc/self/fd lists (as subprocess does): not
    ``os.closerange`` up to the fd limit, which is that many close calls wherever close_range is
    missing (kernels before 5.9, a seccomp profile, a Python built without it) and the limit high."""
    fds = _fds_beyond_stderr()
    if fds is None:  # no /proc (not Linux)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
        return
    for fd in fds:
        with contextlib.suppress(OSError):  # the listing's own fd, already closed
            os.close(fd)


def fork_apart(title: str, stdin: int, stdout: int, stderr: int) -> tuple[int, set[int | signal.Signals]]:
    """Fork. In the parent: the child's pid. In the child: 0, once it is apart (``_apart``) with
    ``stdin``, ``stdout`` and ``stderr`` as fds 0-2, the other fds as they were (its caller closes
    what it must not keep). Also the signal mask to restore in the child once it is ready for a
    signal (see ``ready``). A Ctrl-C at the parent's terminal, or a SIGTERM to its process group,
    that lands between the fork and the child's own session is the parent's: held back here, then
    delivered to the parent alone."""
    sys.stdout.flush()
    sys.stderr.flush()
    held = signal.pthread_sigmask(signal.SIG_BLOCK, STOPPING)
    try:
        pid = os.fork()
    except BaseException:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        raise
    if pid:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        return pid, held
    try:
        _apart(title, stdin, stdout, stderr)
    except BaseException:  # never back into the parent's code
        with contextlib.suppress(Exception):
            sys.excepthook(*sys.exc_info())  # the interpreter's own print, no import
        os._exit(1)
    return 0, held


def _apart(title: str, stdin: int, stdout: int, stderr: int) -> None:
    """The child of ``fork_apart``: the parent's objects never finalized here (their fds are the
    parent's), its own session, titled for `ps`, every Python signal handler of the parent gone
    (Ctrl-C raising KeyboardInterrupt, the others at their defaults, as in a new interpreter), the
    pending Ctrl-C or SIGTERM of the fork's window dropped, and its standard streams."""
    gc.freeze()
    faulthandler = sys.modules.get("faulthandler")  # the parent's `kill -USR1 PID` stack dumps
    if faulthandler is not None:
        faulthandler.unregister(signal.SIGUSR1)
    os.setsid()
    from setproctitle import setproctitle  # why: in a forked child only, never in the CLI's own run

    setproctitle(title)  # in `ps`, not the parent's command line
    for signum in STOPPING:  # pending ones are discarded as they become ignored
        signal.signal(signum, signal.SIG_IGN)
    for signum in signal.valid_signals():
        with contextlib.suppress(OSError, ValueError):
            if callable(signal.getsignal(signum)):
                signal.signal(signum, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for signum in (signal.SIGTERM, signal.SIGCHLD):
        signal.signal(signum, signal.SIG_DFL)
    for fd, target in ((stdin, 0), (stdout, 1), (stderr, 2)):
        if fd != target:
            os.dup2(fd, target)


def ready(held: set[int | signal.Signals]) -> None:
    """The child of ``fork_apart`` takes signals again (a SIGTERM now ends it, as it would end a new
    interpreter that had not yet set its handlers)."""
    signal.pthread_sigmask(signal.SIG_SETMASK, held)
