"""One trial of the digits sweep: a DDP MLP on scikit-learn's bundled digits (no download), two
replicas over gloo. Rank 0 reports the test accuracy and the training loss each epoch; the group's
controller reads `accuracy` from the store to prune a losing trial and to pick the best one.
"""

from __future__ import annotations

import argparse

import torch
import torch.distributed as dist
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from phalanx import log_metrics


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(
        x / 16.0, y, test_size=0.2, random_state=0, stratify=y
    )
    x_train = torch.tensor(x_train, dtype=torch.float32)[rank::world]
    y_train = torch.tensor(y_train)[rank::world]
    x_test, y_test = torch.tensor(x_test, dtype=torch.float32), torch.tensor(y_test)

    model = DistributedDataParallel(
        nn.Sequential(nn.Linear(64, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 10))
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    generator = torch.Generator().manual_seed(rank)
    for epoch in range(1, args.epochs + 1):
        model.train()
        order = torch.randperm(len(x_train), generator=generator)
        total = 0.0
        for start in range(0, len(order), args.batch_size):
            idx = order[start : start + args.batch_size]
            optimizer.zero_grad()
            loss = loss_fn(model(x_train[idx]), y_train[idx])
            loss.backward()
            optimizer.step()
            total += loss.item() * len(idx)
        model.eval()
        with torch.no_grad():
            accuracy = (model(x_test).argmax(dim=1) == y_test).float().mean().item()
        if rank == 0:
            log_metrics(step=epoch, accuracy=accuracy, loss=total / len(order))
            print(f"epoch {epoch}: loss {total / len(order):.4f} test accuracy {accuracy:.4f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
