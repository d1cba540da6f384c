"""Filling the browser tests' store with real runs: seed 003's script (examples/reporting-from-ranks)
through `phalanx run`, twice with different learning rates, so there are two experiments to compare."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import REPO
from tests.integration.server.serverproc import PHALANX, clean_env

EXAMPLE = REPO / "examples" / "reporting-from-ranks" / "polyaxonfile.yml"
RUN_TIMEOUT = 300


@dataclass
class Filled:
    home: Path
    first: str
    second: str
    topology_text: str
    replicas: list[str]
    loss_series: list[str]
    artifacts: list[str]
    general_params: dict[str, str]  # key -> the replica that connected it
    console_replicas: list[str]
    console_needle: str
    differing_param: str


def run_example(home: Path, *params: str) -> str:
    """`phalanx run` the example (its own process group, killed on timeout); returns the experiment id."""
    args = [str(PHALANX), "run", "-f", str(EXAMPLE), "-o", "json"]
    for p in params:
        args += ["--param", p]
    proc = subprocess.Popen(
        args,
        env=clean_env(home),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    assert proc.returncode == 0, f"phalanx run failed ({proc.returncode}):\n{err[-3000:]}"
    doc = json.loads(out)
    assert doc["status"] == "succeeded", doc
    return str(doc["id"])


def fill_with_runs(home: Path) -> Filled:
    first = run_example(home, "lr=0.1")
    second = run_example(home, "lr=0.02")
    return Filled(
        home=home,
        first=first,
        second=second,
        topology_text="1 master · 2 workers",
        replicas=["master", "worker-0", "worker-1"],
        loss_series=["worker 00", "worker 01", "worker 02"],
        artifacts=["temp 00", "temp 01", "temp 02"],
        general_params={
            "worker_0_stuff": "master",
            "worker_1_stuff": "worker-0",
            "worker_2_stuff": "worker-1",
        },
        console_replicas=["master", "worker-0", "worker-1"],
        console_needle="final loss",
        differing_param="lr",
    )
