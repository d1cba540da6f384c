"""Ask the Phalanx server for this start's attempt number: run as ``python phalanx_attempt.py``.

Shipped in the code bundle (standard library only, any Python 3.8+) and run by a Kubernetes or
Kubeflow pod's main container each time it starts, before the user's command; it prints the number,
which the container's shell exports as ``PHALANX_ATTEMPT`` (docs/clusters.md#pods-restarted-by-kubernetes).

Why the server counts: Kubernetes restarts a failed replica without asking Phalanx, either in place
(restartPolicy OnFailure: the kubelet starts the container again in the same pod, whose init
containers and environment do not run again) or as a new pod (the training operator's ExitCode
policy, backoffLimit; a JobSet restart). Nothing the pod carries can number both: its environment
is the same at every start, an emptyDir dies with the pod, and a new pod's UID says nothing about
order. The server outlives every pod, so each start asks it (``POST
/api/v1/experiments/ID/attempts/next`` with the experiment's replica token) and gets a number higher
than every earlier start of its replica; the store then lets the new start's points replace the
steps the earlier ones reported (store.sql.attempts) instead of appending them a second time.

If the server cannot be reached after about a minute, the number the supervisor gave (a `phalanx
resume`), else none, is printed, with a warning: points are then appended as before, never lost.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request


def replica(env: dict[str, str]) -> str:
    """This pod's replica: PHALANX_REPLICA, else the node's, named as the slot launcher names it
    (Kubeflow Trainer pods learn their node from the runtime's variables only)."""
    name = env.get("PHALANX_REPLICA", "").strip()
    if name:
        return name
    for var in ("PET_NODE_RANK", "PHALANX_NODE_RANK", "JOB_COMPLETION_INDEX"):
        value = env.get(var, "").strip()
        if value.isdigit():
            return "master" if int(value) == 0 else f"worker-{int(value) - 1}"
    return "master"


def ask(env: dict[str, str], tries: int = 6, timeout: float = 10.0) -> int:
    """The server's number for this start; raises OSError/ValueError when it cannot be had."""
    host = env.get("PHALANX_HOST", "").rstrip("/")
    experiment = env.get("PHALANX_EXPERIMENT_ID", "")
    if not host or not experiment:
        raise ValueError("PHALANX_HOST or PHALANX_EXPERIMENT_ID is not set")
    floor = env.get("PHALANX_ATTEMPT", "").strip()
    body = {"replica": replica(env), "at_least": int(floor) if floor.isdigit() else 0}
    headers = {"Content-Type": "application/json"}
    if env.get("PHALANX_TOKEN"):
        headers["Authorization"] = "Bearer " + env["PHALANX_TOKEN"]
    url = f"{host}/api/v1/experiments/{experiment}/attempts/next"
    for attempt in range(tries):
        request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                return int(json.loads(answer.read())["attempt"])
        except urllib.error.HTTPError as exc:
            if exc.code < 500 or attempt == tries - 1:  # refused (a wrong token): asking again won't help
                raise
        except OSError:
            if attempt == tries - 1:
                raise
        time.sleep(2**attempt)
    raise OSError("unreachable")  # not reached: the last try raises


def main(env: dict[str, str] | None = None, tries: int = 6) -> int:
    env = dict(os.environ) if env is None else env
    try:
        number = str(ask(env, tries=tries))
        print(f"phalanx: {replica(env)} starts as attempt {number}", file=sys.stderr)
    except (OSError, ValueError, KeyError) as exc:
        number = env.get("PHALANX_ATTEMPT", "").strip()
        print(
            f"phalanx: could not get this start's attempt number from the server ({exc}); "
            "steps reported again after a restart are appended, not replaced",
            file=sys.stderr,
        )
    print(number)
    return 0


if __name__ == "__main__":
    sys.exit(main())
