"""Alert hooks: tell someone outside Phalanx when an experiment needs a look (a replica that has
stalled, one whose hang failed the experiment).

Two hooks, either or both, set where the supervisor runs (a user's shell, or the environment
`phalanx server` was started with, which its experiments' supervisors inherit):

* ``PHALANX_ALERT_COMMAND``: a shell command, run with the alert as one JSON document on its
  standard input and as ``PHALANX_ALERT_KIND``, ``PHALANX_ALERT_EXPERIMENT``, ``PHALANX_ALERT_REPLICA``
  and ``PHALANX_ALERT_TEXT`` in its environment (``mail``, ``notify-send``, a pager's CLI);
* ``PHALANX_ALERT_URL``: an HTTP POST of the same JSON, whose ``text`` field is what Slack and
  Mattermost incoming webhooks show.

Each hook runs in a thread of its own with a timeout, so a slow or broken hook never holds up the
supervisor's watch; the threads are not daemons, so the supervisor's exit (right after a hang failed
its experiment) waits for them, at most HOOK_TIMEOUT. A hook that fails is logged, never raised.
Standard library only.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Any

from phalanx import knobs

log = logging.getLogger(__name__)

HOOK_TIMEOUT = 30.0  # seconds a hook may take before it is given up on


@dataclass(frozen=True)
class Alert:
    """What happened (``kind``: stalled, hung), to which experiment and replica, in words."""

    kind: str
    experiment_id: str
    replica: str | None
    text: str

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "experiment": self.experiment_id,
            "replica": self.replica,
            "text": f"phalanx: experiment {self.experiment_id}: {self.text}",
        }


_pending: list[threading.Thread] = []  # hooks still running (``drain``)


def drain(timeout: float = HOOK_TIMEOUT) -> None:
    """Wait (at most ``timeout`` in all) for the hooks still running: for a process that ends with
    ``os._exit`` (a forked supervisor), which does not wait for its threads."""
    end = time.monotonic() + timeout
    for thread in list(_pending):
        thread.join(max(0.0, end - time.monotonic()))


def send(alert: Alert) -> list[threading.Thread]:
    """Hand ``alert`` to every hook that is set, each in a thread of its own; returns the threads
    (the interpreter's exit joins them). Nothing happens when no hook is set."""
    threads = []
    command, url = knobs.ALERT_COMMAND.value(), knobs.ALERT_URL.value()
    if command:
        threads.append(threading.Thread(target=_run_command, args=(command, alert)))
    if url:
        threads.append(threading.Thread(target=_post, args=(url, alert)))
    _pending[:] = [t for t in _pending if t.is_alive()]
    for thread in threads:
        thread.name = f"alert-{alert.kind}"
        thread.start()
        _pending.append(thread)
    return threads


def _run_command(command: str, alert: Alert) -> None:
    env = {
        **os.environ,
        "PHALANX_ALERT_KIND": alert.kind,
        "PHALANX_ALERT_EXPERIMENT": alert.experiment_id,
        "PHALANX_ALERT_REPLICA": alert.replica or "",
        "PHALANX_ALERT_TEXT": alert.text,
    }
    try:
        done = subprocess.run(
            ["/bin/sh", "-c", command],
            input=json.dumps(alert.to_json()).encode(),
            env=env,
            capture_output=True,
            timeout=HOOK_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("PHALANX_ALERT_COMMAND could not run: %s", exc)
        return
    if done.returncode != 0:
        tail = done.stderr.decode(errors="replace").strip().splitlines()[-1:]
        log.warning("PHALANX_ALERT_COMMAND exited with %d: %s", done.returncode, "".join(tail))


def _post(url: str, alert: Alert) -> None:
    import urllib.request  # why: at the first webhook, not in every supervisor (20 ms of http.client)

    body = json.dumps(alert.to_json()).encode()
    request = urllib.request.Request(url, body, {"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=HOOK_TIMEOUT) as answer:
            answer.read()
    except (OSError, ValueError) as exc:
        log.warning("PHALANX_ALERT_URL %s did not take the alert: %s", url.split("?")[0], exc)
