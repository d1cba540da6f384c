"""A detached supervisor forked from the process that launches it: no Python start-up at all.

Why: a group's controller starts a trial every time a slot frees; `python -m phalanx.runner`
pays an interpreter start-up and every import again (seconds on a loaded machine), while the
controller has all of it in memory already. A fork starts the trial's supervisor in
milliseconds, from the very spec object the controller built.

`phalanx run --detach` forks its supervisor too, from the spec it validated: one interpreter
start and one set of imports for the whole submission instead of two (issue 42).

Only for a single-threaded caller that owns its process (``machine.forks.can_fork``); the Runner
falls back to ``start`` otherwise. The child starts its own session (``machine.forks.fork_apart``:
a Ctrl-C at the controller's terminal does not reach it), writes to its log, closes what the caller says
it must not keep (the group's controller lock, whose flock the child would otherwise hold on),
and never returns into the caller's code: it ends with ``os._exit`` with `phalanx run`'s status.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import traceback
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from phalanx.machine.forks import Forked, close_inherited, fork_apart, ready
from phalanx.store import reuse_after_fork

if TYPE_CHECKING:
    from phalanx.store.base import LocalStore


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


def _leave_the_caller(out: int, closing: list[int]) -> None:
    """The forked child (``forks.fork_apart``) made a supervisor as `python -P -m phalanx.runner`
    starts one: none of the caller's fds but what it keeps (``closing`` closed, inherited ones
    too, so `id=$(phalanx run --detach ... 3>&1)` returns when the command does) and not the
    caller's folder on its import path (a user's `statistics.py` is not what it imports)."""
    for fd in closing:
        with contextlib.suppress(OSError):
            os.close(fd)
    close_inherited()
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
    out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    devnull = os.open(os.devnull, os.O_RDONLY)
    pid, held = fork_apart(f"phalanx supervisor {run_dir.name}", devnull, out, out)
    if pid:
        os.close(out)
        os.close(devnull)
        return Forked(pid)
    code = 1
    try:  # the child: never returns into the caller
        os.close(devnull)
        _leave_the_caller(out, closing)
        ready(held)
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
