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

import json
import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from phalanx.backends.kubeflow import LABEL_INDEX, KubeflowBackend
from phalanx.clusters import Cluster
from phalanx.config import Settings
from phalanx.store import open_store
from phalanx.store.sql import points
from tests.unit.backends.conftest import EXPERIMENT_ID, context, plan

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


def test_a_restarted_or_replaced_pod_replaces_the_steps_it_reports_again(tmp_path: Path) -> None:
    from tests.integration.server.serverproc import start_server, stop_server

    home = tmp_path / "server"
    home.mkdir()
    server = start_server(home, token="s3cret")
    store = open_store(Settings(home=home))
    try:
        store.create_experiment(name="k8s", project="p", experiment_id=EXPERIMENT_ID)
        src = tmp_path / "exp"
        src.mkdir()
        (src / "train.py").write_text(TRAIN)
        engine = KubeflowBackend(
            Settings(home=tmp_path / "client", token="s3cret"),
            Cluster(name="k", kind="kubernetes", server_url=server.url),
        )
        ctx = replace(context(), workdir=str(src))
        dry = engine.dry_run(replace(plan(workers=1, command="python -u train.py"), max_restarts=3), ctx)
        job, secret = dict(dry.objects[0]), dict(dry.objects[1])
        token = secret["stringData"]["token"]
        engine.upload_code(ctx)
        specs = job["spec"]["pytorchReplicaSpecs"]
        assert specs["Master"]["restartPolicy"] == "OnFailure"  # the kubelet restarts it in place

        behaviour = tmp_path / "behaviour.json"
        bin_dir = str(Path(sys.executable).parent)  # `python` as the image has it
        extra = {
            "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "HOME": str(tmp_path),
            "BEHAVIOUR": str(behaviour),
        }

        def pod(role: str, index: str, code: Path) -> tuple[list[str], list[str], dict[str, str]]:
            spec = specs[role]["template"]["spec"]
            main = spec["containers"][0]
            return spec["initContainers"][0]["command"], main["command"], _env(main, token, index, extra)

        def start(role: str, code: Path, first: int, last: int, base: float, exit: int) -> str:
            behaviour.write_text(json.dumps({"first": first, "last": last, "base": base, "exit": exit}))
            fetch, command, env = pod(role, "0", code)
            if not code.exists():  # a new pod: its init container fetches the code first
                assert _run(fetch, env, code).returncode == 0
            done = _run(command, env, code)
            assert done.returncode == exit, done.stderr[-3000:]
            return done.stderr

        pod_a, pod_b, worker = tmp_path / "pod-a", tmp_path / "pod-b", tmp_path / "pod-w"
        consoles = [
            start("Master", pod_a, 0, 11, 0.0, exit=1),
            start("Worker", worker, 0, 19, 1000.0, exit=0),
            start("Master", pod_a, 0, 14, 100.0, exit=1),  # restarted in place
            start("Master", pod_b, 10, 19, 200.0, exit=0),  # replaced, resuming from step 10
        ]

        with store.engine.connect() as conn:
            rows = points.by_writer(conn, EXPERIMENT_ID)
        master = [(int(s), float(v)) for r, s, v in rows if r == "master"]
        assert master == [(s, 100.0 + s) for s in range(10)] + [(s, 200.0 + s) for s in range(10, 20)]
        assert [(int(s), float(v)) for r, s, v in rows if r == "worker-0"] == [
            (s, 1000.0 + s) for s in range(20)
        ]
        assert store.metric_view(EXPERIMENT_ID, "loss")["train"].count == 40
        said = ["master starts as attempt 0", "worker-0 starts as attempt 0", "attempt 1", "attempt 2"]
        for console, says in zip(consoles, said, strict=True):
            assert says in console
        # `phalanx get` (and the API's run details) show how often Kubernetes restarted each pod
        from phalanx.cli.tracking import run_details, run_details_text

        assert store.replica_starts(EXPERIMENT_ID) == {"master": 2, "worker-0": 0}
        details = run_details(store, EXPERIMENT_ID)
        assert details["pod_attempts"] == {"master": 2, "worker-0": 0}
        assert "pod attempts: master 2, worker-0 0" in run_details_text(details)
    finally:
        store.close()
        stop_server(server.proc)


def test_a_start_that_cannot_reach_the_server_goes_on_with_the_supervisors_number(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from phalanx.backends import podattempt
    from phalanx.ports import free_port

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
