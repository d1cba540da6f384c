"""A pod that Kubernetes restarts by itself reports its steps again without duplicating them.

No Kubernetes runs here (the fake in these tests is the Kubernetes API only), so the kubelet and the
training operator are played by this test: it renders a real PyTorchJob (restartPolicy OnFailure)
through the Kubeflow engine, then runs the rendered init container's and main container's commands
as real processes against a real `phalanx server`, the way the cluster would: the master's
container starts, fails, is started again in the same pod (same code folder, init containers not
run again), fails again, and its pod is then replaced (a fresh folder, the code fetched again);
the worker runs once beside it, reporting into the same series. Only the paths under /phalanx/code
are moved into the test's folder.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from phalanx.backends.kubeflow import LABEL_INDEX

TRAIN = """\
import json, os, sys
from phalanx import Task

todo = json.load(open(os.environ["BEHAVIOUR"]))  # what this start of the replica does
task = Task.current_task()
for step in range(todo["first"], todo["last"] + 1):
    task.get_logger().report_scalar("loss", "train", todo["base"] + step, step)
assert task.flush(timeout=60)
print("attempt", os.environ.get("PHALANX_ATTEMPT"), flush=True)
sys.exit(todo["exit"])
"""


def _env(container: dict[str, Any], token: str, index: str, extra: dict[str, str]) -> dict[str, str]:
    """The container's environment as the kubelet resolves it: Secret and downward-API references
    filled in, then $(VAR) references expanded."""
    env: dict[str, str] = {}
    for item in container.get("env", []):
        if "value" in item:
            value = item["value"]
        elif "secretKeyRef" in item["valueFrom"]:
            value = token
        else:
            assert item["valueFrom"]["fieldRef"]["fieldPath"] == f"metadata.labels['{LABEL_INDEX}']"
            value = index
        env[item["name"]] = re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), value)
    return {**env, **extra}


def _run(argv: list[str], env: dict[str, str], code: Path) -> subprocess.CompletedProcess[str]:
    argv = [a.replace("/phalanx/code", str(code)) for a in argv]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)


def test_a_start_that_cannot_reach_the_server_goes_on_with_the_supervisors_number(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from phalanx.backends import podattempt
    from phalanx.machine.ports import free_port

    env = {
        "PHALANX_HOST": f"http://127.0.0.1:{free_port()}",
        "PHALANX_EXPERIMENT_ID": "e",
        "PHALANX_ATTEMPT": "2",
    }
    assert podattempt.main(env, tries=1) == 0
    out = capsys.readouterr()
    assert out.out == "2\n"
    assert "could not get this start's attempt number" in out.err and "appended" in out.err
    assert podattempt.main({**env, "PHALANX_ATTEMPT": ""}, tries=1) == 0
    assert capsys.readouterr().out == "\n"  # no number: the points are appended as before


def test_a_trainer_node_asks_for_the_replica_its_slot_launcher_reports_as() -> None:
    from phalanx.backends import podattempt

    assert podattempt.replica({"PHALANX_REPLICA": "worker-3", "PET_NODE_RANK": "0"}) == "worker-3"
    assert podattempt.replica({"PET_NODE_RANK": "0"}) == "master"
    assert podattempt.replica({"PET_NODE_RANK": "2"}) == "worker-1"
    assert podattempt.replica({"JOB_COMPLETION_INDEX": "1"}) == "worker-0"
    assert podattempt.replica({}) == "master"
