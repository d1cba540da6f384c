"""The Ray engine live on a real two-node Ray cluster (raylets 127.0.0.1 and 127.0.0.2, 1 CPU each,
in a loopback-only network namespace; tests/support/ray_cluster.py).

- the PyTorch DDP example, unchanged (the file tests/integration/local/test_run_cli.py runs on this
  machine and tests/integration/slurm/test_slurm_backend.py on Slurm), places one replica per node,
  trains to the usual accuracy and both ranks' series land in one experiment;
- MXNet's parameter server (scheduler, server, two workers packed two per node), its pip packages
  built once per node;
- a gang that cannot fit (3 replicas, one per node, on 2 nodes) waits as `pending` with the reason
  in the cluster's numbers, and `phalanx stop` ends it, leaving no placement group;
- a killed replica fails the experiment with a reason naming it, its sibling is stopped;
- a failed group is restarted (max_restarts) as a new placement group;
- a laptop with no cluster of its own submits through the server to its Ray target.
Every run ends with Ray holding no actor or placement group of it (its GCS tables) and no process of
it on the machine.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import REPO

from .conftest import PoolServer

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(900)]

EXAMPLES = REPO / "examples"
SUBMIT = REPO / "tests" / "integration" / "server" / "data" / "submit"


def _processes_of(exp_id: str) -> list[int]:
    """Processes of this machine carrying the experiment's id."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"PHALANX_EXPERIMENT_ID={exp_id}".encode() in environ:
            found.append(int(proc.name))
    return found


def _gone(exp_id: str, wait: float = 20.0) -> list[int]:
    deadline = time.monotonic() + wait
    while _processes_of(exp_id) and time.monotonic() < deadline:
        time.sleep(0.5)
    return _processes_of(exp_id)


def _get(server: PoolServer, exp_id: str) -> dict[str, Any]:
    r = server.phalanx("get", exp_id, "-o", "json")
    assert r.returncode == 0, r.stdout + r.stderr
    doc: dict[str, Any] = json.loads(r.stdout)
    return doc


def _series(server: PoolServer, exp_id: str, title: str) -> dict[str, list[float]]:
    from phalanx.config import Settings
    from phalanx.store import open_store

    store = open_store(Settings(home=server.home))
    try:
        return {name: list(p.values) for name, p in store.metrics(exp_id).get(title, {}).items()}
    finally:
        store.close()


def _holds_nothing_of(server: PoolServer, exp_id: str) -> None:
    held = server.pool.holds()
    assert not [a for a in held["actors"] if exp_id in a], held
    assert not [g for g in held["groups"] if exp_id in g], held
    assert _gone(exp_id) == []


def _wait_status(server: PoolServer, exp_id: str, wanted: set[str], timeout: float = 240) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        doc = _get(server, exp_id)
        if doc["status"] in wanted or time.monotonic() > deadline:
            return doc
        time.sleep(1)


def test_the_ddp_example_runs_one_replica_per_node_with_both_ranks_in_one_experiment(
    pool_server: PoolServer,
) -> None:
    file = EXAMPLES / "pytorch-ddp" / "polyaxonfile.yml"
    exp_id = uuid.uuid4().hex[:12]
    r = pool_server.phalanx(
        "run", "-f", str(file), "--cluster", "pool", "--param", "epochs=6", "--experiment-id", exp_id
    )
    assert r.returncode == 0, r.stdout + r.stderr
    doc = _get(pool_server, exp_id)
    assert doc["status"] == "succeeded" and doc["backend"] == "ray", doc
    hosts = {rep["name"]: rep["host"] for rep in doc["replicas"]}
    assert sorted(hosts.values()) == ["127.0.0.1", "127.0.0.2"], hosts  # one replica per node
    accuracy = _series(pool_server, exp_id, "accuracy")
    assert sorted(accuracy) == ["worker 00", "worker 01"], accuracy
    assert min(values[-1] for values in accuracy.values()) >= 0.9, accuracy
    assert "test accuracy" in r.stdout  # the master's console reached the follower
    _holds_nothing_of(pool_server, exp_id)


def _file(tmp_path: Path, name: str, text: str) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "polyaxonfile.yml").write_text(text)
    return folder / "polyaxonfile.yml"


SPREAD_THREE = """
version: 1
kind: experiment
name: three-spread
framework: pytorch
environment:
  affinity: {podAntiAffinity: {}}
  replicas:
    n_workers: 2
    default_worker:
      affinity: {podAntiAffinity: {}}
run:
  cmd: python -c "print('never placed')"
"""


def test_a_gang_that_cannot_fit_waits_with_its_reason_and_can_be_stopped(
    pool_server: PoolServer, tmp_path: Path
) -> None:
    file = _file(tmp_path, "spread", SPREAD_THREE)
    r = pool_server.phalanx("run", "-f", str(file), "--cluster", "pool", "--dry-run")
    assert r.returncode == 0 and '"strategy": "STRICT_SPREAD"' in r.stdout, r.stdout + r.stderr
    r = pool_server.phalanx("run", "-f", str(file), "--cluster", "pool", "-d")
    assert r.returncode == 0, r.stdout + r.stderr
    exp_id = r.stdout.split()[0]
    doc = _wait_status(pool_server, exp_id, {"pending"})
    assert doc["status"] == "pending", doc
    assert doc["reason"] == "needs 3 x {CPU: 1} spread over 3 nodes; the cluster has 2", doc
    assert [g for g in pool_server.pool.holds()["groups"] if exp_id in g]  # it waits in Ray, visibly
    r = pool_server.phalanx("stop", exp_id)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = _wait_status(pool_server, exp_id, {"stopped"}, timeout=60)
    assert doc["status"] == "stopped", doc
    _holds_nothing_of(pool_server, exp_id)


LOOPING = """
version: 1
kind: experiment
name: looping
framework: pytorch
environment:
  replicas:
    n_workers: 1
run:
  cmd: python -c "import time; [time.sleep(0.5) for _ in range(2400)]"
"""


def _replica_process(exp_id: str, replica: str, timeout: float = 240) -> int:
    """The replica's own command (the python the reaper started), once it runs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid in _processes_of(exp_id):
            try:
                environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            mine = f"PHALANX_REPLICA={replica}".encode() in environ and b"time.sleep" in cmdline
            if mine and b"reaper" not in cmdline and not cmdline.startswith(b"/bin/sh"):
                return pid
        time.sleep(0.5)
    raise AssertionError(f"{replica} of {exp_id} never ran")


def test_a_killed_replica_fails_the_experiment_naming_it_and_leaves_nothing(
    pool_server: PoolServer, tmp_path: Path
) -> None:
    file = _file(tmp_path, "looping", LOOPING)
    r = pool_server.phalanx("run", "-f", str(file), "--cluster", "pool", "-d")
    assert r.returncode == 0, r.stdout + r.stderr
    exp_id = r.stdout.split()[0]
    os.kill(_replica_process(exp_id, "worker-0"), signal.SIGKILL)
    doc = _wait_status(pool_server, exp_id, {"failed", "succeeded", "stopped"})
    assert doc["status"] == "failed", doc
    # the shell of run.cmd reports its command's death as 128 + 9, as on the local engine
    assert doc["reason"].startswith("worker-0 exited with code 137 (its command was killed by SIGKILL)"), doc
    states = {rep["name"]: rep["state"] for rep in doc["replicas"]}
    assert states == {"master": "stopped", "worker-0": "failed"}, doc["replicas"]
    _holds_nothing_of(pool_server, exp_id)


RESTARTED = """
version: 1
kind: experiment
name: restarted
framework: pytorch
environment:
  replicas:
    n_workers: 1
run:
  cmd: python -c "import os, sys; a = os.environ.get('PHALANX_ATTEMPT', '0'); sys.exit(3 if a == '0' and
    os.environ['PHALANX_REPLICA'] == 'worker-0' else 0)"
  max_restarts: 1
"""


def test_a_failed_group_is_restarted_as_a_new_placement_group_and_succeeds(
    pool_server: PoolServer, tmp_path: Path
) -> None:
    from phalanx.config import Settings
    from phalanx.store import open_store

    file = _file(tmp_path, "restarted", RESTARTED)
    exp_id = uuid.uuid4().hex[:12]
    r = pool_server.phalanx("run", "-f", str(file), "--cluster", "pool", "--experiment-id", exp_id)
    assert r.returncode == 0, r.stdout + r.stderr
    assert _get(pool_server, exp_id)["status"] == "succeeded"
    store = open_store(Settings(home=pool_server.home))
    try:
        attempts = store.attempts(exp_id)
    finally:
        store.close()
    assert [a["status"] for a in attempts] == ["failed", "succeeded"], attempts
    assert attempts[0]["reason"].startswith("worker-0 exited with code 3"), attempts
    _holds_nothing_of(pool_server, exp_id)


def test_a_laptop_submits_through_the_server_to_its_ray_target(
    pool_server: PoolServer, tmp_path: Path
) -> None:
    """The folder the Slurm target's test submits (tests/integration/server/data/submit): a master
    and a worker that say hello and report three points each."""
    laptop = tmp_path / "laptop-home"  # no cluster registered here: the server has the Ray target
    laptop.mkdir()
    project = tmp_path / "project"
    shutil.copytree(SUBMIT, project)
    args = ["run", "-f", str(project / "exp.yml"), "--server", pool_server.url, "--cluster", "pool"]
    r = pool_server.phalanx(*args, "--follow", home=laptop)
    assert r.returncode == 0, r.stdout + r.stderr
    exp_id = r.stdout.splitlines()[0].strip()
    assert "[master] hello from master" in r.stdout and "[worker-0] hello from worker-0" in r.stdout
    doc = _get(pool_server, exp_id)  # read in the server's own store
    assert doc["status"] == "succeeded" and doc["backend"] == "ray" and doc["cluster"] == "pool", doc
    assert {rep["host"] for rep in doc["replicas"]} == {"127.0.0.1", "127.0.0.2"}, doc["replicas"]
    assert _series(pool_server, exp_id, "loss") == {
        "master": [1.0, 0.5, 1 / 3],
        "worker-0": [1.0, 0.5, 1 / 3],
    }
    _holds_nothing_of(pool_server, exp_id)


MXNET_WHEELS = ("mxnet==1.9.1", "numpy<1.24")
HALF = "{cpu: {requests: 0.5}}"


def test_an_mxnet_parameter_server_job_runs_with_its_environment_built_once_per_node(
    pool_server: PoolServer, tmp_path: Path
) -> None:
    """The example's scheduler, server and two workers (half a core each: four replicas on two
    1-CPU nodes, packed), its pip_packages built on each node from the pool's wheelhouse (the
    namespace has no network; `pip download` fills it first, outside)."""
    wheels = pool_server.pool.root / "wheels"
    got = subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "-d", str(wheels), *MXNET_WHEELS],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if got.returncode != 0:
        pytest.skip(f"the MXNet wheels could not be downloaded here: {got.stderr[-500:]}")
    project = tmp_path / "mxnet-ps"
    shutil.copytree(EXAMPLES / "mxnet-ps", project)
    text = (project / "polyaxonfile.yml").read_text()
    half = "".join(f"    {role}: {{resources: {HALF}}}\n" for role in ("default_worker", "default_ps"))
    text = text.replace("environment:\n", f"environment:\n  resources: {HALF}\n")
    text = text.replace("    n_ps: 1\n", "    n_ps: 1\n" + half)
    (project / "polyaxonfile.yml").write_text(text)
    exp_id = uuid.uuid4().hex[:12]
    r = pool_server.phalanx(
        "run", "-f", str(project / "polyaxonfile.yml"), "--cluster", "pool", "--param", "epochs=2",
        "--experiment-id", exp_id, timeout=800,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    doc = _get(pool_server, exp_id)
    assert doc["status"] == "succeeded", doc
    assert {rep["host"] for rep in doc["replicas"]} == {"127.0.0.1", "127.0.0.2"}, doc["replicas"]
    accuracy = _series(pool_server, exp_id, "accuracy")
    assert sorted(accuracy) == ["worker 0", "worker 1"], accuracy
    assert min(values[-1] for values in accuracy.values()) >= 0.85, accuracy
    built = sorted(pool_server.pool.root.glob("node-*/.cache/phalanx/ray/envs/*/.ready"))
    assert len(built) == 2, built  # one environment per node, for all its replicas
    _holds_nothing_of(pool_server, exp_id)
