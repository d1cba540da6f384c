"""The ingester that follows a process recording into a spool (a plain script's Task, a served
model's session): a detached ``python -m phalanx.ingest --follow-pid`` in a session of its own, so
it outlives the process to ingest its last events, importing this very Phalanx (its package root
first on PYTHONPATH), its output in the spool's ingest.log. Standard library only."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path


def spawn_ingester(
    spool: Path,
    options: Sequence[str] = (),
    pass_fds: tuple[int, ...] = (),
    drop_env: Sequence[str] = (),
) -> subprocess.Popen[bytes]:
    """Start it for ``spool``: ``options`` are more ingest arguments (``--interval``,
    ``--console-fds``), ``pass_fds`` the descriptors it inherits, ``drop_env`` the variables of this
    process it must not see."""
    spool.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    package_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
    for name in drop_env:
        env.pop(name, None)
    argv = [sys.executable, "-m", "phalanx.ingest", "--spool", str(spool), "--follow-pid", str(os.getpid())]
    with open(spool / "ingest.log", "ab") as out:
        return subprocess.Popen(
            [*argv, *options],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
            pass_fds=pass_fds,
            env=env,
        )
