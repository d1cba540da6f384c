"""A compute target the server owns: `phalanx run -f FILE --server URL --cluster NAME` sends the
folder to a real `phalanx server` on loopback, which runs it on the live two-node Slurm cluster
registered in the server's home (not the submitter's), and the metrics land on the server; a target
the server does not have, from the CLI or as an estimator's compute_target, is refused by name."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.integration.server.serverproc import (
    PHALANX,
    TRUSTING,
    Server,
    clean_env,
    start_server,
    stop_server,
)
from tests.support.cli import phalanx_cli
from tests.support.slurm import LocalSlurm

from phalanx.clusters import add_cluster
from phalanx.errors import UsageError
from phalanx.estimators import Estimator, Experiment

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.timeout(300)]

DATA = Path(__file__).resolve().parents[1] / "server" / "data" / "submit"
TOKEN = "targets-test-token-0123456789"


@pytest.fixture
def server(phalanx_home: Path, slurm_cluster: LocalSlurm) -> Iterator[Server]:
    add_cluster(slurm_cluster.cluster(), phalanx_home)  # `phalanx cluster add` on the server's machine
    # trusting its submitters: the job runs as the server, whose Python (under /root here) a boxed
    # job's account could not reach; the boxed path is tests/integration/isolation's Slurm test
    s = start_server(phalanx_home, token=TOKEN, args=TRUSTING)
    try:
        yield s
    finally:
        stop_server(s.proc)


def api(server: Server, path: str) -> Any:
    req = urllib.request.Request(f"{server.url}/api/v1{path}")
    req.add_header("Authorization", f"Bearer {TOKEN}")
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.load(r)


def test_an_experiment_submitted_for_the_servers_slurm_cluster_runs_there_with_its_metrics_on_the_server(
    server: Server, slurm_cluster: LocalSlurm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Also: an estimator's compute_target is the submit's target (refused by name before anything
    runs). One server for both (it was one each: a server's start and stop cost more than the
    refusal), the refusal first, while the server has no experiment at all."""
    assert api(server, "/targets") == [
        {"name": "local", "kind": "local"},
        {"name": slurm_cluster.name, "kind": "slurm"},
    ]

    # an estimator's compute_target is the submit's target: a slip is refused, naming what the
    # server has, and nothing is recorded
    monkeypatch.setenv("PHALANX_HOME", str(tmp_path / "laptop-home"))  # nothing of the laptop's is read
    source = tmp_path / "estimator"
    source.mkdir()
    (source / "train.py").write_text("print('hi')\n")
    remote = Experiment("from-python", "targets-tests", server=server.url, token=TOKEN)
    estimator = Estimator(source_directory=source, entry_script="train.py", compute_target="slurm-tset")
    with pytest.raises(UsageError, match=f"target 'slurm-tset'.*local, {slurm_cluster.name}"):
        remote.submit(estimator)
    assert api(server, "/experiments")["total"] == 0

    # `phalanx run --server --cluster`, refused by name, then run on the server's cluster
    project = tmp_path / "project"
    shutil.copytree(DATA, project)
    client_home = tmp_path / "client-home"  # the submitter has no cluster registered: the server does
    client_home.mkdir()

    def args(cluster: str) -> list[str]:
        return ["-f", str(project / "exp.yml"), "--server", server.url, "--cluster", cluster, "--follow"]

    env = clean_env(client_home, PHALANX_TOKEN=TOKEN)
    # a slip: refused, naming what the server has; in this process (tests/support/cli.py), as the
    # refusal starts nothing: the `phalanx` process is the real run's below
    refused = phalanx_cli("run", *args("slurm-tset"), env={**{k: None for k in os.environ}, **env})
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "target 'slurm-tset'" in refused.stderr and f"local, {slurm_cluster.name}" in refused.stderr
    assert "Traceback" not in refused.stderr
    r = subprocess.run(
        [str(PHALANX), "run", *args(slurm_cluster.name)], env=env, capture_output=True, text=True, timeout=240
    )
    assert r.returncode == 0, r.stdout + r.stderr
    exp_id = r.stdout.splitlines()[0].strip()
    assert "[master] hello from master" in r.stdout and "[worker-0] hello from worker-0" in r.stdout
    exp = api(server, f"/experiments/{exp_id}")
    assert exp["status"] == "succeeded" and exp["backend"] == "slurm", exp
    # Slurm placed the two replicas on its two nodes (SLURMD_NODENAME inside each task)
    assert {rep["name"]: rep["host"] for rep in exp["replicas"]} == {"master": "n1", "worker-0": "n2"}
    loss = api(server, f"/experiments/{exp_id}/metrics/loss")
    assert {name: series["steps"] for name, series in loss["series"].items()} == {
        "master": [0, 1, 2],
        "worker-0": [0, 1, 2],
    }
    assert slurm_cluster.wait_queue_empty() == []
