"""Seed 003's pattern without ``flush()``: ranks spawned by torch.multiprocessing from a ``Task.init``
process report (connect, upload_artifact, report_scalar), leave their process group and exit. Every
record must carry the rank of the call, not the rank the background thread sees when it writes at
exit (then there is no group any more and every rank looked like rank 0)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from phalanx.config import Settings
from phalanx.ingest import Ingester
from phalanx.store import open_store

pytest.importorskip("torch")
pytestmark = pytest.mark.slow

SCRIPT = textwrap.dedent(
    """
    import os, sys
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from phalanx import Task

    def rank_main(rank, world, port):
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(port)
        dist.init_process_group("gloo", rank=rank, world_size=world)
        task = Task.current_task()
        task.connect({f"worker_{dist.get_rank()}_stuff": dist.get_rank()})
        task.upload_artifact(f"temp {dist.get_rank():02d}", artifact_object={"worker_rank": dist.get_rank()})
        task.get_logger().report_scalar("loss", "all", value=float(rank), iteration=0)
        dist.barrier()
        dist.destroy_process_group()  # no flush(): the records are written after this

    if __name__ == "__main__":
        task = Task.init(project_name="p", task_name="no flush")
        mp.spawn(rank_main, args=(2, int(sys.argv[1])), nprocs=2, join=True)  # a Python + torch each
    """
)


def test_spawned_ranks_are_attributed_without_flush(tmp_path: Path) -> None:
    from phalanx.machine.ports import free_port

    home = tmp_path / "home"
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHALANX_") and k != "RANK"}
    env["PHALANX_HOME"] = str(home)
    done = subprocess.run(
        [sys.executable, str(script), str(free_port())],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    store = open_store(Settings(home=home, db_url=None, artifacts_url=None))
    Ingester(store, None, home / "spool").run_once()
    [exp] = store.list_experiments().items
    params = {p.key: p.rank for p in store.params(exp.id) if p.section == "General"}
    assert params == {"worker_0_stuff": 0, "worker_1_stuff": 1}  # rank 1's own, not rank 0 for all
    artifacts = {a.name: a.rank for a in store.artifacts(exp.id)}
    assert artifacts == {"temp 00": 0, "temp 01": 1}
