"""Asking a running experiment to stop, without the server deciding its status itself.

Only the supervisor decides an experiment's status, so the server leaves a stop request where the
supervisor looks for one (``<PHALANX_HOME>/runs/<id>/stop``, checked on every turn of its loop) and
returns at once; the supervisor stops every replica and marks the experiment stopped "on request".
(No signal is sent: the supervisor would then report "stopped by SIGTERM", which is not what
happened.) When no supervisor is alive any more (``runs/<id>/supervisor.pid`` names no phalanx
process: it was killed), nothing would ever read the request, so the server falls back to
``supervisor.stop_experiment``, which cancels what the engine still runs and marks it stopped.
"""

from __future__ import annotations

import logging

from phalanx.config import Settings
from phalanx.domain import Experiment
from phalanx.store.base import Store
from phalanx.supervisor import stop_experiment, supervisor_pid
from phalanx.supervisor.stopping import write_stop_request

log = logging.getLogger(__name__)


def request_stop(store: Store, settings: Settings, experiment: Experiment) -> str:
    """Record a stop request for ``experiment`` and signal its supervisor; returns what was done."""
    write_stop_request(settings, experiment.id)
    pid = supervisor_pid(settings, experiment.id)
    if pid is not None:
        log.info("stop of %s requested from supervisor %s", experiment.id, pid)
        return f"stop requested; its supervisor (pid {pid}) is stopping the replicas"
    status = stop_experiment(store, settings, experiment, timeout=0)
    return f"no supervisor was running; the experiment is now {status}"
