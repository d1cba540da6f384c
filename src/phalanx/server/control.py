"""Asking a running experiment to stop, without the server ever talking to a backend itself.

Only the supervisor decides an experiment's status, so the server records a stop request where the
supervisor looks for one, ``<PHALANX_HOME>/runs/<id>/stop``, and, when the supervisor's pid is known
and that process runs on this machine, sends it SIGTERM (what Ctrl-C on ``phalanx run`` does). The
supervisor stops every replica and marks the experiment stopped.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import time

from phalanx.config import Settings
from phalanx.domain import Experiment

log = logging.getLogger(__name__)

SUPERVISOR_PID_FILES = ("supervisor.pid", "pid")


def request_stop(settings: Settings, experiment: Experiment) -> str:
    """Record a stop request for ``experiment`` and signal its supervisor; returns what was done."""
    run_dir = settings.runs_dir / experiment.id
    run_dir.mkdir(parents=True, exist_ok=True)
    request = run_dir / "stop"
    tmp = run_dir / "stop.tmp"
    tmp.write_text(json.dumps({"requested_at": time.time(), "by": "server"}))
    os.replace(tmp, request)
    pid = _supervisor_pid(run_dir)
    if pid is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
            log.info("sent SIGTERM to supervisor %s of experiment %s", pid, experiment.id)
            return f"stop requested; SIGTERM sent to supervisor pid {pid}"
    return f"stop requested ({request})"


def _supervisor_pid(run_dir: os.PathLike[str]) -> int | None:
    for name in SUPERVISOR_PID_FILES:
        path = os.path.join(run_dir, name)
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        with contextlib.suppress(ValueError):
            pid = int(text.split()[0]) if text else 0
            if pid > 1:
                return pid
    return None
