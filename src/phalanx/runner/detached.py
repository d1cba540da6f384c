"""A detached experiment's supervision, from the launch the Runner wrote into its run folder: what
`python -m phalanx.runner RUN_DIR` runs, and what a trial forked from its group's controller runs in
the child. It gets the Runner to supervise through from its caller, so that neither the Runner
(which forks) nor this module imports the other's in a circle.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from phalanx.errors import PhalanxError, SpecError, exit_status
from phalanx.machine.locks import hold
from phalanx.runner.observers import PlainObserver
from phalanx.runner.options import LAUNCH_LOCK_FD, read_launch

SUPERVISOR_LOCK = "supervisor.lock"  # runs/<id>/supervisor.lock: held by an accepted launch's supervisor

if TYPE_CHECKING:
    from phalanx.runner.running import Runner
    from phalanx.store.base import LocalStore


def _keep_launch_lock() -> None:
    """The LAUNCH_LOCK the Runner passed to this process (``Runner.start``): held for this
    supervisor's life, as its open fd, but not passed on to what it starts (its replicas)."""
    fd = os.environ.pop(LAUNCH_LOCK_FD, None)
    if fd is not None and fd.isdigit():
        with contextlib.suppress(OSError):
            os.set_inheritable(int(fd), False)


def supervise_launch(
    argv: list[str], make_runner: Callable[[], Runner], store: LocalStore | None = None
) -> int:
    """Supervise the launch written in ``argv[0]`` (a run folder) through ``make_runner()``, as
    `python -m phalanx.runner RUN_DIR` and a forked trial do; the exit status of `phalanx run`.
    ``store``: an open store to use (a supervisor forked from a group's controller), else the
    settings' store is opened once the replicas are starting."""
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1 PID`: where is it stuck?
    if len(argv) != 1:
        sys.stderr.write("usage: python -m phalanx.runner RUN_DIR\n")
        return 2
    run_dir = Path(argv[0])
    _keep_launch_lock()
    launch = read_launch(run_dir)
    if launch.options.accepted and hold(run_dir / SUPERVISOR_LOCK) is None:
        # the server's launcher started it twice (it restarted in between): the first one runs it
        sys.stderr.write(f"phalanx: another supervisor runs experiment {run_dir.name}; this one leaves\n")
        return 0
    if launch.headline:
        sys.stderr.write(f"phalanx: {launch.headline}\n")
    try:
        outcome = make_runner().run(
            launch.spec,
            launch.options,
            PlainObserver(sys.stdout),
            owns_run_dir=launch.remove_run_dir,
            store=store,
        )
    except PhalanxError as exc:
        text = str(exc)  # as `phalanx` prints it: a file's problems one located line each
        located = isinstance(exc, SpecError) and "\n" in text
        sys.stderr.write(f"{text}\n" if located or text.startswith("error:") else f"error: {text}\n")
        return exit_status(exc)
    except KeyboardInterrupt:
        sys.stderr.write("phalanx: interrupted\n")
        return 130
    tail = f": {outcome.reason}" if outcome.reason else ""
    sys.stderr.write(f"phalanx: experiment {outcome.experiment_id} {outcome.status}{tail}\n")
    return outcome.exit_code
