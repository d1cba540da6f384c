"""DDP on scikit-learn's digits (no download): every rank trains on its shard, gradients are averaged
over gloo, and each rank reports its loss and the test accuracy to the one Phalanx experiment.

Started by `phalanx run`, which sets MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE (torchrun's names),
so `init_process_group("gloo")` with env:// needs nothing else.
"""

from __future__ import annotations

import argparse

import torch
import torch.distributed as dist
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from phalanx import Task


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    task = Task.init(project_name="examples", task_name="pytorch-ddp-digits")
    logger = task.get_logger()

    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(
        x / 16.0, y, test_size=0.2, random_state=0, stratify=y
    )
    x_train = torch.tensor(x_train, dtype=torch.float32)[rank::world]  # this rank's shard
    y_train = torch.tensor(y_train)[rank::world]
    x_test, y_test = torch.tensor(x_test, dtype=torch.float32), torch.tensor(y_test)

    model = DistributedDataParallel(nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)))
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()
    generator = torch.Generator().manual_seed(rank)
    accuracy = 0.0
    for epoch in range(args.epochs):
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
        logger.report_scalar("loss", f"worker {rank:02d}", value=total / len(order), iteration=epoch)
        logger.report_scalar("accuracy", f"worker {rank:02d}", value=accuracy, iteration=epoch)
        print(f"rank {rank} epoch {epoch}: loss {total / len(order):.4f} test accuracy {accuracy:.4f}")

    if rank == 0:
        print(f"test accuracy: {accuracy:.4f}")
    # The weights and an ONNX export checked with onnxruntime (docs/estimators.md); only rank 0
    # saves, the other ranks return at once and wait at the barrier below.
    task.save_model(model, "digits-mlp", example_input=x_test[:1])
    task.close()
    dist.barrier()  # before destroy: avoids a known SIGABRT at exit in torch 2.13's gloo teardown
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
