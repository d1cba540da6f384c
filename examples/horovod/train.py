"""A digits MLP trained with Horovod (``hvd.DistributedOptimizer``) on every rank of an MPI launch.

Each rank trains on its shard of scikit-learn's bundled digits; Horovod averages the gradients
(allreduce) so every rank holds the same model, and every rank reports the test accuracy it measures
(they must agree). Run under `phalanx run` (Phalanx's mpirun wiring) or by hand under `mpirun -np 2`.
"""

from __future__ import annotations

import argparse

import horovod.torch as hvd
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn

from phalanx import Task


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.01)
    args = parser.parse_args()

    hvd.init()
    torch.set_num_threads(1)
    rank, world = hvd.rank(), hvd.size()

    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(x / 16.0, y, test_size=0.25, random_state=0)
    x_train = torch.tensor(x_train[rank::world], dtype=torch.float32)  # this rank's shard
    y_train = torch.tensor(y_train[rank::world])
    x_test_t, y_test_t = torch.tensor(x_test, dtype=torch.float32), torch.tensor(y_test)

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    loss_fn = nn.CrossEntropyLoss()
    logger = Task.current_task().get_logger()
    generator = torch.Generator().manual_seed(rank)
    steps = (len(x_train) + args.batch_size - 1) // args.batch_size
    steps = int(hvd.allreduce(torch.tensor(steps), op=hvd.Min))  # every rank takes the same steps

    print(f"[rank {rank}] {world} Horovod ranks, {len(x_train)} training samples here", flush=True)
    accuracy = 0.0
    for epoch in range(args.epochs):
        model.train()
        order = torch.randperm(len(x_train), generator=generator)
        total = 0.0
        for i in range(steps):
            batch = order[i * args.batch_size : (i + 1) * args.batch_size]
            optimizer.zero_grad()
            loss = loss_fn(model(x_train[batch]), y_train[batch])
            loss.backward()
            optimizer.step()
            total += loss.item() * len(batch)
        model.eval()
        with torch.no_grad():
            accuracy = float((model(x_test_t).argmax(dim=1) == y_test_t).float().mean())
        logger.report_scalar("loss", f"rank {rank}", value=total / len(x_train), iteration=epoch)
        logger.report_scalar("accuracy", f"rank {rank}", value=accuracy, iteration=epoch)
        if rank == 0:
            print(f"epoch {epoch}: loss {total / len(x_train):.4f} test accuracy {accuracy:.3f}", flush=True)
    print(f"[rank {rank}] final test accuracy: {accuracy:.3f}", flush=True)
    Task.current_task().flush()
    hvd.shutdown()


if __name__ == "__main__":
    main()
