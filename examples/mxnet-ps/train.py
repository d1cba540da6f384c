"""MXNet parameter-server training (kvstore `dist_sync`): a scheduler, servers and workers.

Phalanx sets the DMLC_* variables of each replica (the master is the scheduler, ps replicas are the
servers). The scheduler and the servers do their whole job inside `import mxnet` and exit once the
workers are done; each worker trains a Gluon MLP on its shard of the data and pushes its gradients
through the kvstore, so every worker holds the same weights after each step.
The data is synthesised (ten Gaussian classes): nothing is downloaded.
"""

from __future__ import annotations

import argparse
import os

import numpy as np

from phalanx import Task

ROLE = os.environ.get("DMLC_ROLE", "worker")
import mxnet as mx  # noqa: E402  (the scheduler and servers serve here and only return at the end)


def make_data(n_train: int = 2400, n_test: int = 600, seed: int = 0) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    centers = rng.normal(0.0, 1.0, size=(10, 20))
    y = rng.integers(0, 10, size=n_train + n_test)
    x = (centers[y] + rng.normal(0.0, 1.0, size=(len(y), 20))).astype("float32")
    return x[:n_train], y[:n_train].astype("float32"), x[n_train:], y[n_train:].astype("float32")


def train() -> None:
    from mxnet import autograd, gluon

    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    args = parser.parse_args()

    kv = mx.kv.create("dist_sync")
    me = f"worker {kv.rank}"
    x_train, y_train, x_test, y_test = make_data()
    shard = slice(kv.rank, None, kv.num_workers)  # each worker trains on its own part of the data
    loader = gluon.data.DataLoader(
        gluon.data.ArrayDataset(mx.nd.array(x_train[shard]), mx.nd.array(y_train[shard])),
        batch_size=args.batch_size,
        shuffle=True,
        last_batch="discard",
    )

    mx.random.seed(42)  # same initial weights everywhere (the kvstore also broadcasts rank 0's)
    net = gluon.nn.Sequential()
    net.add(gluon.nn.Dense(64, activation="relu"), gluon.nn.Dense(10))
    net.initialize(mx.init.Xavier())
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": args.lr}, kvstore=kv)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()

    logger = Task.current_task().get_logger()
    print(f"[{me}] {kv.num_workers} workers, {len(x_train[shard])} training samples here", flush=True)
    accuracy = 0.0
    for epoch in range(args.epochs):
        total, batches = 0.0, 0
        for x, y in loader:
            with autograd.record():
                loss = loss_fn(net(x), y)
            loss.backward()
            trainer.step(args.batch_size * kv.num_workers)
            total += float(loss.mean().asscalar())
            batches += 1
        predictions = net(mx.nd.array(x_test)).argmax(axis=1).asnumpy()
        accuracy = float(np.mean(predictions == y_test))
        logger.report_scalar("loss", me, value=total / max(batches, 1), iteration=epoch)
        logger.report_scalar("accuracy", me, value=accuracy, iteration=epoch)
        print(
            f"[{me}] epoch {epoch}: loss {total / max(batches, 1):.4f} test accuracy {accuracy:.3f}",
            flush=True,
        )
    if kv.rank == 0:
        print(f"final test accuracy: {accuracy:.3f}", flush=True)
    Task.current_task().flush()


if __name__ == "__main__":
    if ROLE == "worker":
        train()
    else:  # reached only once the job is over
        print(f"[{ROLE}] done", flush=True)
