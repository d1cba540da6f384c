"""`phalanx run -f FILE --server URL`: send the experiment to a Phalanx server, and follow it there.

The experiment's folder (the file's folder) goes as a code bundle (``phalanx.bundles``: the same
skips and cap as a Kubernetes bundle), with the file's text, the `--param` overrides and the
priority, as one multipart POST with an idempotency key, so a submit retried after a timeout never
makes a second experiment. Following reads each replica's console through the logs API, by offset,
and ends with the experiment's status as a local run does. The HTTP client is ``phalanx.apiclient``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from typing import Any

from phalanx.apiclient import TIMEOUT, Client, ServerError, multipart, read_token
from phalanx.following import DONE, POLL_SECONDS, ExperimentFollower, Patience
from phalanx.terminal_text import for_stream

__all__ = ["TIMEOUT", "Client", "ServerError", "follow", "multipart", "read_token"]


# -- following ------------------------------------------------------------------------------------
def follow(client: Client, experiment_id: str, out: Any = None) -> int:
    """Print every replica's console as it comes until the experiment ends; its exit status (0
    succeeded, 1 failed, 130 stopped), through server restarts (``phalanx.following``). Ctrl-C is
    the caller's: it detaches."""
    follower = ExperimentFollower(client, experiment_id, sys.stderr.write)
    while True:
        exp = follower.look(out or sys.stdout)
        if exp is not None and exp["status"] in DONE:
            return _ended(exp, out)
        time.sleep(POLL_SECONDS)


def follow_group(client: Client, group_id: str, out: Any = None) -> int:
    """Say each trial's state as it changes until the group ends; the exit status of `phalanx
    group run` (0 finished, 1 every trial failed, 130 stopped), through server restarts."""
    out = out or sys.stderr
    said: dict[str, str] = {}
    patience = Patience(f"group {group_id}", sys.stderr.write)
    while True:
        group = patience.attempt(lambda: client.get(f"/groups/{group_id}"))
        for trial in (group or {}).get("trials") or []:
            key, state = str(trial.get("number")), str(trial.get("state"))
            if said.get(key) != state:
                said[key] = state
                out.write(f"phalanx: trial {key} ({trial.get('experiment_id')}): {state}\n")
        if group is not None and group.get("status") in DONE:
            out.write(f"phalanx: group {group_id} {group['status']}\n")
            return {"succeeded": 0, "stopped": 130}.get(str(group["status"]), 1)
        time.sleep(POLL_SECONDS)


def _ended(exp: Mapping[str, Any], out: Any) -> int:
    status = exp["status"]
    if status == "succeeded":
        sys.stderr.write(f"phalanx: experiment {exp['id']} succeeded\n")
        return 0
    if status == "stopped":
        sys.stderr.write(f"phalanx: experiment {exp['id']} stopped\n")
        return 130
    failed = [r for r in exp.get("replicas") or [] if r["state"] == "failed"]
    named = ", ".join(
        f"{r['name']} (exit code {r['exit_code']})" if r.get("exit_code") is not None else r["name"]
        for r in failed
    )
    # a failure's reason may quote the replica's last lines: escaped on a terminal as its lines are
    why = f": {for_stream(sys.stderr)(exp['reason'])}" if exp.get("reason") else ""
    sys.stderr.write(f"phalanx: experiment {exp['id']} failed{why}\n")
    if named:  # a line of its own: a reason may end with the replica's last log lines
        sys.stderr.write(f"phalanx: failed replicas: {named}\n")
    return 1
