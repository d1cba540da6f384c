"""`run.cmd: torchrun --nproc_per_node=1 train.py` in a 2-replica `framework: pytorch` experiment:
each replica's torchrun gets the rendezvous from the replica's wiring, so the two launchers form one
job of world size 2 (ranks 0 and 1, an all_reduce across both), one training process per replica,
and `phalanx check` says what it did to the command."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from phalanx.domain import ExperimentStatus

from .conftest import PHALANX, _env, phalanx_run, read_store

pytestmark = pytest.mark.slow

SCRIPT = """
import os
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
value = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(value)
rank, world, node = dist.get_rank(), dist.get_world_size(), os.environ["GROUP_RANK"]
print(f"rank {rank} of {world} node {node} sum {value.item():g}", flush=True)
dist.destroy_process_group()
"""

EXPERIMENT = """
version: 1
kind: experiment
name: torchrun in a replica
framework: pytorch
environment:
  replicas:
    n_workers: 1
run:
  cmd: torchrun --nproc_per_node=1 train.py
"""


def test_torchrun_in_each_replica_forms_one_job_from_the_wiring(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SCRIPT)
    (tmp_path / "polyaxonfile.yml").write_text(EXPERIMENT)
    home = tmp_path / "home"
    checked = subprocess.run(
        [str(PHALANX), "check", "-f", str(tmp_path / "polyaxonfile.yml")],
        env=_env(home), capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stderr
    note = "note: run.cmd starts a launcher: Phalanx gives it each replica's rendezvous (torchrun --nnodes=2 "
    assert note + '--node_rank="${NODE_RANK:-$PET_NODE_RANK}"' in checked.stderr
    done = phalanx_run(home, tmp_path)
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    store = read_store(home)
    [exp] = store.list_experiments().items
    assert exp.status == ExperimentStatus.SUCCEEDED
    lines = [(line.replica, line.text) for line in store.logs(exp.id)]
    ranks = [(replica, text) for replica, text in lines if text.startswith("rank ")]
    # one training process per replica (no double launch), torchrun's ranks follow the replicas' nodes
    assert sorted(ranks) == [("master", "rank 0 of 2 node 0 sum 3"), ("worker-0", "rank 1 of 2 node 1 sum 3")]
