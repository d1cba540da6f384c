"""A small PyTorch DDP job for the Slurm tests: trains an MLP on a synthetic ten-class set over gloo.

It reports one loss series per rank, through the tracking SDK when it is there, else straight into
the spool (the SDK's own stdlib format), and prints where it runs. With --hold SECONDS the
non-master replicas print `ready pid=N` and then wait, so a test can kill one.

Where it runs is printed, and the hold taken, before torch is imported: a test that kills a held
replica waits for that line, not for torch's import (seconds of CPU on a loaded machine). The data
is made with torch (no scikit-learn import); the tests check where the ranks ran, that they met and
what they reported, not what the model learnt.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from typing import Any


def reporter() -> tuple[Callable[..., None], Callable[[], Any]]:
    try:
        from phalanx import Task

        logger = Task.current_task().get_logger()
        return logger.report_scalar, Task.current_task().flush
    except (ImportError, AttributeError):
        from phalanx.spool import SpoolWriter

        rank = os.environ.get("PHALANX_RANK") or None
        writer = SpoolWriter(
            os.environ["PHALANX_SPOOL"],
            experiment_id=os.environ["PHALANX_EXPERIMENT_ID"],
            replica=os.environ["PHALANX_REPLICA"],
            role=os.environ["PHALANX_ROLE"],
            index=int(os.environ["PHALANX_INDEX"]),
            rank=int(rank) if rank else None,
        )

        def report(title: str, series: str, value: float, iteration: int) -> None:
            writer.write("scalar", {"title": title, "series": series, "value": value, "step": iteration})

        return report, writer.sync


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--hold", type=float, default=0.0)
    parser.add_argument("--no-track", action="store_true", help="report nothing (no ingester running)")
    args = parser.parse_args()
    replica = os.environ["PHALANX_REPLICA"]
    print(f"replica={replica} node={os.environ.get('SLURMD_NODENAME')} pid={os.getpid()}", flush=True)
    if args.hold and replica != "master":
        print(f"ready pid={os.getpid()}", flush=True)
        time.sleep(args.hold)

    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    report, flush = reporter() if not args.no_track else (lambda *a: None, lambda: None)
    generator = torch.Generator().manual_seed(0)  # the same 512 samples on every rank, each its shard
    x = torch.randn(512, 64, generator=generator)
    y = torch.randint(0, 10, (512,), generator=generator)
    x_t, y_t = x[rank::world], y[rank::world]
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10)))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for epoch in range(args.epochs):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x_t), y_t)
        loss.backward()
        opt.step()
        report("loss", f"rank {rank}", float(loss.item()), epoch)
    print(f"replica={replica} rank={rank} world={world} done", flush=True)
    flush()
    dist.barrier()  # every rank has done its work and reported it
    # Leave without torch's teardown: gloo's threads sometimes end the process with "terminate
    # called without an active exception" (SIGABRT) after the work is done (seen in CI on the
    # heterogeneous job's worker). These tests check where ranks ran and what they reported, not
    # torch's teardown; the standard streams are flushed first.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
