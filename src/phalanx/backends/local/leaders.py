"""Starting a replica's leader, its reaper (``backends.local.reaper``), in a session of its own.

Forked from this process (``reaper.fork``) while no other thread runs (``forks.can_fork``): no
interpreter start and no import per replica (issue 42). Otherwise, and always for a boxed replica,
whose reaper runs as root, started as ``python -I``: no PYTHON* variable, no user site, not the
replica's folder (a planted json.py would run as root) on its path; it is told where Phalanx lives
(installed or a source tree).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING

from phalanx.backends.local import reaper
from phalanx.errors import UsageError
from phalanx.machine.forks import can_fork

if TYPE_CHECKING:
    from phalanx.machine.forks import ChildProcess

_PACKAGE_ROOT = str(Path(__file__).resolve().parents[3])
_REAPER_BOOT = (
    "import sys; sys.path.insert(0, sys.argv.pop(1)); "
    "from phalanx.backends.local.reaper import main; sys.exit(main(sys.argv[1:]))"
)


def start_leader(
    config: Path,
    env: Mapping[str, str],
    cwd: str,
    stdin: IO[bytes],
    stderr: IO[bytes],
    title: str,
    boxed: bool,
) -> ChildProcess:
    """The reaper of the unit ``config``, with ``env`` as its environment, in ``cwd``, reading
    ``stdin`` (a boxed one's secrets) and writing its own trouble to ``stderr`` (the replica's log);
    ``title``: what `ps` shows for a forked one."""
    if not boxed and can_fork():
        return reaper.fork(config, env, cwd, stdin.fileno(), stderr.fileno(), title)
    return subprocess.Popen(
        [sys.executable, "-I", "-c", _REAPER_BOOT, _PACKAGE_ROOT, str(config)],
        env=dict(env),
        cwd=cwd,
        stdin=stdin,
        stdout=subprocess.DEVNULL,
        stderr=stderr,
        start_new_session=True,  # a process group per replica
    )


def check_work_folder(cwd: str, replica: str, boxed: bool) -> None:
    """UsageError when ``cwd`` cannot be the replica's folder (any more): gone, replaced by a file,
    or not to be entered by this account (a boxed replica's own account is checked in its box).
    Checked as each group starts: after a restart, or a wait in the queue, too."""
    if not os.path.isdir(cwd):
        why = "is gone or no longer a folder"
    elif not boxed and not os.access(cwd, os.X_OK):
        why = "cannot be entered (no permission)"
    else:
        return
    raise UsageError(
        f"the work folder {cwd} {why} (changed after the experiment was submitted?): {replica} cannot"
        " start there; restore it, or run the experiment again from a folder that exists"
    )
