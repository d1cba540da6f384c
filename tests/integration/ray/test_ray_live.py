"""The Ray engine live on a real two-node Ray cluster (raylets 127.0.0.1 and 127.0.0.2, 1 CPU each,
in a loopback-only network namespace; tests/support/ray_cluster.py). Each test here costs a minute
or more on a loaded machine, so the cluster proves what only it can, three runs in all:

- the PyTorch DDP example, unchanged (the file tests/integration/local/test_run_cli.py runs on this
  machine and tests/integration/slurm/test_slurm_backend.py on Slurm), submitted from a laptop with
  no cluster of its own through the server to its Ray target: one replica per node, the usual
  accuracy, both ranks' series in one experiment, each console followed;
- a gang that cannot fit (3 replicas, one per node, on 2 nodes) waits as `pending` with the reason
  in the cluster's numbers, and `phalanx stop` ends it, leaving no placement group;
- a killed replica fails its group with a reason naming it, and max_restarts starts a new
  placement group that succeeds.
The environment a node builds once for all its replicas is tested without Ray
(tests/integration/backends/test_ray_actor_env.py); the placement, wiring and reasons in
tests/unit/backends/test_ray_render.py.
Every run ends with Ray holding no actor or placement group of it (its GCS tables) and no process of
it on the machine.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import REPO

from phalanx.config import Settings
from phalanx.store import open_store

from .conftest import PoolServer

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(900)]

EXAMPLES = REPO / "examples"


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


def test_the_ddp_example_submitted_from_a_laptop_runs_one_replica_per_node_in_one_experiment(
    pool_server: PoolServer, tmp_path: Path
) -> None:
    """A laptop with no cluster of its own submits the DDP example through the server to its Ray
    target and follows it; one replica lands on each node and both ranks' series reach the server's
    store."""
    laptop = tmp_path / "laptop-home"  # no cluster registered here: the server has the Ray target
    laptop.mkdir()
    file = EXAMPLES / "pytorch-ddp" / "polyaxonfile.yml"
    args = ["run", "-f", str(file), "--server", pool_server.url, "--cluster", "pool", "--param", "epochs=6"]
    r = pool_server.phalanx(*args, "--follow", home=laptop)
    assert r.returncode == 0, r.stdout + r.stderr
    exp_id = r.stdout.splitlines()[0].strip()
    doc = _get(pool_server, exp_id)  # read in the server's own store
    assert doc["status"] == "succeeded" and doc["backend"] == "ray" and doc["cluster"] == "pool", doc
    hosts = {rep["name"]: rep["host"] for rep in doc["replicas"]}
    assert sorted(hosts.values()) == ["127.0.0.1", "127.0.0.2"], hosts  # one replica per node
    accuracy = _series(pool_server, exp_id, "accuracy")
    assert sorted(accuracy) == ["worker 00", "worker 01"], accuracy
    assert min(values[-1] for values in accuracy.values()) >= 0.9, accuracy
    # each replica's console reached the follower, tagged with its name
    assert "[master] test accuracy:" in r.stdout and "[worker-0] rank 1 epoch 5:" in r.stdout, r.stdout
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


KILLED_THEN_RESTARTED = """
version: 1
kind: experiment
name: killed-then-restarted
framework: pytorch
environment:
  replicas:
    n_workers: 1
run:
  cmd: python -c "import os, time; a = os.environ.get('PHALANX_ATTEMPT', '0');
    [time.sleep(0.5) for _ in range(2400 if a == '0' else 0)]"
  max_restarts: 1
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


def test_a_killed_replica_fails_its_group_naming_it_and_a_new_placement_group_succeeds(
    pool_server: PoolServer, tmp_path: Path
) -> None:
    """Attempt 0 loops until its worker's command is killed: the group fails with a reason naming
    the replica; max_restarts starts attempt 1 as a new placement group, which
    exits 0. Ray holds nothing of either at the end."""
    file = _file(tmp_path, "killed", KILLED_THEN_RESTARTED)
    r = pool_server.phalanx("run", "-f", str(file), "--cluster", "pool", "-d")
    assert r.returncode == 0, r.stdout + r.stderr
    exp_id = r.stdout.split()[0]
    os.kill(_replica_process(exp_id, "worker-0"), signal.SIGKILL)
    doc = _wait_status(pool_server, exp_id, {"succeeded", "stopped"})  # failed only between attempts
    assert doc["status"] == "succeeded", doc
    attempts = _attempts(pool_server, exp_id)
    assert [a["status"] for a in attempts] == ["failed", "succeeded"], attempts
    # the shell of run.cmd reports its command's death as 128 + 9, as on the local engine
    reason = attempts[0]["reason"]
    assert reason.startswith("worker-0 exited with code 137 (its command was killed by SIGKILL)"), attempts
    _holds_nothing_of(pool_server, exp_id)


def _attempts(server: PoolServer, exp_id: str) -> list[dict[str, Any]]:
    store = open_store(Settings(home=server.home))
    try:
        return store.attempts(exp_id)
    finally:
        store.close()
