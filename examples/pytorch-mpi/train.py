"""PyTorch DDP started by `mpirun` (`backend: mpi`), with no Horovod build.

Phalanx starts one `mpirun` over every slot of the master and the workers and maps Open MPI's
OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK to RANK / WORLD_SIZE / LOCAL_RANK (and sets MASTER_ADDR /
MASTER_PORT), so torch.distributed's env:// rendezvous over gloo works unchanged. Run by hand under a
bare `mpirun`, the script does the same mapping itself. Data: scikit-learn's bundled digits.
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from phalanx import Task


def mpi_to_torch_env() -> None:
    """Only needed outside Phalanx: under `phalanx run` these are already set."""
    for torch_name, mpi_name in (("RANK", "OMPI_COMM_WORLD_RANK"), ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE")):
        if torch_name not in os.environ and mpi_name in os.environ:
            os.environ[torch_name] = os.environ[mpi_name]
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29511")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.01)
    args = parser.parse_args()

    mpi_to_torch_env()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()

    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(x / 16.0, y, test_size=0.25, random_state=0)
    x_train = torch.tensor(x_train[rank::world], dtype=torch.float32)  # this rank's shard
    y_train = torch.tensor(y_train[rank::world])
    x_test_t, y_test_t = torch.tensor(x_test, dtype=torch.float32), torch.tensor(y_test)

    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)))
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()
    logger = Task.current_task().get_logger()
    generator = torch.Generator().manual_seed(rank)

    print(f"[rank {rank}] {world} ranks over mpirun, {len(x_train)} training samples here", flush=True)
    accuracy = 0.0
    for epoch in range(args.epochs):
        model.train()
        order = torch.randperm(len(x_train), generator=generator)
        total = 0.0
        for i in range(0, len(order), args.batch_size):
            batch = order[i : i + args.batch_size]
            optimizer.zero_grad()
            loss = loss_fn(model(x_train[batch]), y_train[batch])
            loss.backward()
            optimizer.step()
            total += loss.item() * len(batch)
        model.eval()
        with torch.no_grad():
            accuracy = float((model(x_test_t).argmax(dim=1) == y_test_t).float().mean())
        logger.report_scalar("loss", f"rank {rank}", value=total / len(x_train), iteration=epoch)
        if rank == 0:
            logger.report_scalar("accuracy", "test", value=accuracy, iteration=epoch)
            print(f"epoch {epoch}: loss {total / len(x_train):.4f} test accuracy {accuracy:.3f}", flush=True)
    if rank == 0:
        print(f"final test accuracy: {accuracy:.3f}", flush=True)
    Task.current_task().flush()
    dist.barrier()  # before destroy: without it one rank in ~6 aborts inside destroy_process_group
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
