"""Start k processes of one replica inside a pod, one per slot, the way torchrun would.

A pod is one replica (one "node" to the operator). When the file asks for ``processes_per_replica: k``
something inside the pod has to start the k processes and give each its rank; the Kubeflow operators
only set the node-level variables (``PET_NNODES``, ``PET_NODE_RANK``, ``PET_NPROC_PER_NODE``,
``MASTER_ADDR``/``PET_MASTER_ADDR``...) and expect torchrun, which the user's command may not use.
This launcher is shipped in the code bundle (standard library only, any Python 3.8+) and run as
``python phalanx_slots.py``: process j of node n gets RANK n*k+j, LOCAL_RANK j and WORLD_SIZE
nnodes*k, and the tracking identity of its replica. If one process fails, the others are stopped
and the pod exits with its code, so the operator sees the failure at once (fail fast, as locally).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

COMMAND_VAR = "PHALANX_COMMAND"


def _int(env: dict[str, str], *names: str, default: int) -> int:
    for name in names:
        value = env.get(name, "").strip()
        if value.isdigit():
            return int(value)
    return default


def slot_envs(env: dict[str, str]) -> list[dict[str, str]]:
    """The environment of every process of this pod, computed from the operator's node variables."""
    k = _int(env, "PHALANX_PROCESSES", "PET_NPROC_PER_NODE", default=1)
    node = _int(env, "PET_NODE_RANK", "PHALANX_NODE_RANK", default=0)
    nnodes = _int(env, "PET_NNODES", "PHALANX_NNODES", default=1)
    out = []
    for j in range(k):
        e = dict(env)
        e.update(
            RANK=str(node * k + j),
            LOCAL_RANK=str(j),
            WORLD_SIZE=str(nnodes * k),
            LOCAL_WORLD_SIZE=str(k),
            GROUP_RANK=str(node),
            NODE_RANK=str(node),
            PHALANX_RANK=str(node),
        )
        if "MASTER_ADDR" not in e and "PET_MASTER_ADDR" in e:
            e["MASTER_ADDR"] = e["PET_MASTER_ADDR"]
        if "MASTER_PORT" not in e and "PET_MASTER_PORT" in e:
            e["MASTER_PORT"] = e["PET_MASTER_PORT"]
        if node == 0:
            e.update(PHALANX_REPLICA="master", PHALANX_ROLE="master", PHALANX_INDEX="0")
        else:
            e.update(PHALANX_REPLICA=f"worker-{node - 1}", PHALANX_ROLE="worker", PHALANX_INDEX=str(node - 1))
        out.append(e)
    return out


def run(env: dict[str, str], poll: float = 0.1) -> int:
    """Start every slot; return the first non-zero exit code (others stopped), else 0."""
    command = env.get(COMMAND_VAR)
    if not command:
        print(f"phalanx_slots: {COMMAND_VAR} is not set", file=sys.stderr)
        return 2
    procs = [subprocess.Popen(["/bin/sh", "-c", command], env=e) for e in slot_envs(env)]

    def forward(signum: int, _frame: object) -> None:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    while True:
        codes = [p.poll() for p in procs]
        failed = [c for c in codes if c not in (None, 0)]
        if failed:
            for p in procs:
                if p.poll() is None:
                    p.terminate()
            deadline = time.monotonic() + 10
            for p in procs:
                try:
                    p.wait(timeout=max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
            code = failed[0]
            return code if code > 0 else 128 - code  # killed by signal n: the shell's 128+n
        if all(c == 0 for c in codes):
            return 0
        time.sleep(poll)


if __name__ == "__main__":
    sys.exit(run(dict(os.environ)))
