"""A detached supervisor forked from the process that launches it: no Python start-up at all.

Why: a group's controller starts a trial every time a slot frees; `python -m phalanx.runner`
pays an interpreter start-up and every import again (seconds on a loaded machine), while the
controller has all of it in memory already. A fork starts the trial's supervisor in
milliseconds, from the very spec object the controller built.

`phalanx run --detach` forks its supervisor too, from the spec it validated: one interpreter
start and one set of imports for the whole submission instead of two (issue 42).

Only for a single-threaded caller that owns its process (a fork copies only the calling thread:
a lock another thread held would never be released in the child), which is what ``can_fork``
checks; the Runner falls back to ``start`` otherwise. The child starts its own session (a Ctrl-C
at the controller's terminal does not reach it), writes to its log, closes what the caller says
it must not keep (the group's controller lock, whose flock the child would otherwise hold on),
and never returns into the caller's code: it ends with ``os._exit`` with `phalanx run`'s status.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from phalanx.store import reuse_after_fork

if TYPE_CHECKING:
    from phalanx.store.base import LocalStore


class SupervisorProcess(Protocol):
    """A detached supervisor as the process that started it holds it: a ``subprocess.Popen`` or a
    ``Forked``."""

    pid: int
    args: Any  # what runs: ``Popen.args``, or ["fork", PID]

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def terminate(self) -> None: ...


def can_fork() -> bool:
    """Whether this process may fork a supervisor: POSIX, and no other thread runs."""
    return hasattr(os, "fork") and threading.active_count() == 1


class Forked:
    """A forked supervisor as its parent holds it: ``pid``, ``poll()``, ``wait()`` and
    ``returncode`` as ``subprocess.Popen`` has them (the controller treats both alike)."""

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
        """SIGTERM, as Popen.terminate (the supervisor stops its replicas on it)."""
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


# What a forked supervisor imports on its way to starting the replicas (the supervision loop, the
# local engine, the frameworks' wiring, the spool, the ingester, sampling, secrets): imported once
# by the caller (``preload``), a fork finds them in memory instead of importing them before every
# trial's replicas start (0.2-0.3 s at low load; issue 30).
PRELOAD = (
    "phalanx.supervisor",
    "phalanx.runner.__main__",
    "phalanx.runner.detached",
    "phalanx.runner.observers",
    "phalanx.backends.registry",
    "phalanx.backends.local.engine",
    "phalanx.frameworks",
    "phalanx.frameworks.pytorch",
    "phalanx.frameworks.tensorflow",
    "phalanx.frameworks.mxnet",
    "phalanx.frameworks.mpi",
    "phalanx.spool",
    "phalanx.ingest",
    "phalanx.machine.sysmetrics",
    "phalanx.store.secrets",
    "phalanx.queue",
    "phalanx.ends",
    "phalanx.reconcile",
    "phalanx.repro",
    "phalanx.buildenv",
    "faulthandler",
    "tarfile",
)


def preload() -> None:
    """Import what a forked supervisor needs (``PRELOAD``), here, once (a module that cannot be
    imported is left to the supervisor, which then says why)."""
    for name in PRELOAD:
        with contextlib.suppress(Exception):
            importlib.import_module(name)


def _close_inherited() -> None:
    """Close every inheritable fd beyond stderr: the ones this process was handed by whatever started
    it (Python opens its own non-inheritable, PEP 446), such as the write end of a pipe a caller
    reads to its end (`id=$(phalanx run --detach ... 3>&1)`), which the supervisor would otherwise
    hold open for its whole life, as `start`'s ``close_fds`` does not let it."""
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:  # no /proc (not Linux): left as they are
        return
    for name in names:
        fd = int(name)
        with contextlib.suppress(OSError):  # the listing's own fd, already closed
            if fd > 2 and os.get_inheritable(fd):
                os.close(fd)


_STOPPING = (signal.SIGINT, signal.SIGTERM)


def _leave_the_caller(run_dir: Path, out: int, closing: list[int], held: set[int | signal.Signals]) -> None:
    """The forked child made a supervisor as `python -P -m phalanx.runner` starts one: its own
    session, titled for `ps`; the caller's pending Ctrl-C or SIGTERM dropped, then Ctrl-C raising
    KeyboardInterrupt (reported as interrupted, exit 130) and SIGTERM and SIGCHLD at their defaults;
    none of the caller's fds but what it keeps (``closing`` closed, inherited ones too); stdin
    /dev/null and its output ``out``; and not the caller's folder on its import path (a user's
    `statistics.py` is not what it imports)."""
    gc.freeze()  # the caller's objects are never finalized here (their fds are the caller's)
    os.setsid()
    from setproctitle import setproctitle  # why: in a forked supervisor only, not in every runner

    setproctitle(f"phalanx supervisor {run_dir.name}")  # in `ps`, not the caller's command line
    for signum in _STOPPING:  # pending ones are discarded as they become ignored
        signal.signal(signum, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_SETMASK, held)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for signum in (signal.SIGTERM, signal.SIGCHLD):
        signal.signal(signum, signal.SIG_DFL)
    for fd in closing:
        with contextlib.suppress(OSError):
            os.close(fd)
    _close_inherited()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(devnull)
    os.close(out)
    if not sys.flags.safe_path and sys.path and sys.path[0] in ("", os.getcwd()):
        del sys.path[0]  # `python -m ...` and `-c` put the folder they started in first


def fork_supervisor(
    run_dir: Path,
    log: Path,
    env: Mapping[str, str],
    close: Iterable[int] = (),
    store: LocalStore | None = None,
    *,
    supervise: Callable[[list[str], Any], int],
) -> Forked:
    """Fork; the child supervises the launch written in ``run_dir`` (as `python -m phalanx.runner
    RUN_DIR` does) with ``env`` added to its environment, its output appended to ``log``.
    ``store``: the caller's open store, which the child uses (``store.reuse_after_fork``) instead
    of opening one. ``supervise(argv, store)``: what the child runs (the Runner hands in
    ``runner.detached.supervise_launch`` on a Runner of the child's own, so this module imports
    neither the Runner nor the detached supervisor's main)."""
    closing = list(close)
    sys.stdout.flush()
    sys.stderr.flush()
    out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    # a Ctrl-C at the caller's terminal (or a SIGTERM to its process group) between the fork and the
    # child's own session is the caller's: held back here, then delivered to the caller alone
    held = signal.pthread_sigmask(signal.SIG_BLOCK, _STOPPING)
    pid = os.fork()
    if pid:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        os.close(out)
        return Forked(pid)
    code = 1
    try:  # the child: never returns into the caller
        _leave_the_caller(run_dir, out, closing, held)
        os.environ.update(env)
        inherited = None
        if store is not None:
            inherited = reuse_after_fork(store)
        code = supervise([str(run_dir)], inherited)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        with contextlib.suppress(Exception):
            traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            # os._exit waits for no thread: a hung trial's alert must still go out (a supervisor
            # that sent none never imported the hooks)
            alerts = sys.modules.get("phalanx.alerts")
            if alerts is not None:
                alerts.drain()
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)
