"""Seed 003 on Phalanx: a main task whose ranks all report into the one experiment.

ClearML's pytorch_distributed_example.py with only the import changed. Run it as a plain script:

    python examples/reporting-from-ranks/train.py --nodes 3

The main process calls Task.init (this creates the experiment), then spawns --nodes ranks with
torch.multiprocessing; they meet over gloo on a free loopback port, train a small DistributedDataParallel
model on synthetic data, and each one, through Task.current_task() (the main task):
  * uploads the artifact 'temp NN' = {'worker_rank': NN},
  * reports its loss as series 'worker NN' of the title 'loss' (one chart, one line per rank),
  * connects {'worker_N_stuff': ...} (section General), and
  * prints to the console (captured for every rank).
The argparse arguments are recorded as section Args.

Under `phalanx run -f examples/reporting-from-ranks/polyaxonfile.yml` each replica is already one rank
(RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set by the launcher), so the script trains that rank alone.
"""

from __future__ import annotations

import argparse
import os
import socket
from random import randint

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from phalanx import Task


def train(rank: int, world_size: int, args: argparse.Namespace) -> None:
    """One rank: report the way seed 003 does, through the main task."""
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    task = Task.current_task()
    assert task is not None, "run this under Task.init or `phalanx run`"

    task.upload_artifact(f"temp {dist.get_rank():02d}", artifact_object={"worker_rank": dist.get_rank()})

    torch.manual_seed(1234 + rank)
    weights = torch.tensor([[2.0], [-3.0], [0.5], [1.0]])
    x = torch.randn(256, 4)
    y = x @ weights + 0.1 * torch.randn(256, 1)  # this rank's shard of a linear problem
    model = DistributedDataParallel(nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    loss_fn = nn.MSELoss()
    for i in range(args.iterations):
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()  # gradients are averaged over the ranks
        optimizer.step()
        Task.current_task().get_logger().report_scalar(
            "loss", f"worker {dist.get_rank():02d}", value=loss.item(), iteration=i
        )

    param = {f"worker_{dist.get_rank()}_stuff": "some stuff " + str(randint(0, 100))}
    Task.current_task().connect(param)
    print(f"worker {dist.get_rank():02d}: final loss {loss.item():.4f}", flush=True)

    Task.current_task().flush()
    dist.barrier()  # before destroy: avoids a known SIGABRT at exit in torch's gloo teardown
    dist.destroy_process_group()


def _spawned(rank: int, world_size: int, port: int, args: argparse.Namespace) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    train(rank, world_size, args)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description="Every rank reports into the main task.")
    parser.add_argument("--nodes", type=int, default=3, help="ranks to spawn (plain `python` run)")
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--lr", type=float, default=0.05)
    args = parser.parse_args()

    # The main task first: every rank spawned below reports into it.
    task = Task.init(project_name="examples", task_name="test torch distributed")
    print(os.getpid(), "ARGS:", args, flush=True)

    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # one replica of `phalanx run`
        train(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args)
    else:
        mp.spawn(_spawned, args=(args.nodes, _free_port(), args), nprocs=args.nodes, join=True)
    task.close()


if __name__ == "__main__":
    main()
