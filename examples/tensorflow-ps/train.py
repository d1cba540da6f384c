"""Asynchronous training with tf.distribute.ParameterServerStrategy: a chief, workers and a ps.

Phalanx sets TF_CONFIG for each replica (master = `chief`, `worker` 0..n-1, `ps` 0..m-1). Workers and
parameter servers only host a `tf.distribute.Server` and never exit by themselves; the chief
(the coordinator) schedules training steps on them, and once it finishes Phalanx stops them and counts
the experiment as succeeded. The model's variables live on the ps, the steps run on the workers.
The data is synthesised (ten Gaussian classes): nothing is downloaded.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import tensorflow as tf

from phalanx import Task


def make_data(n_train: int = 2400, n_test: int = 600, seed: int = 0) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    centers = rng.normal(0.0, 1.0, size=(10, 20))
    y = rng.integers(0, 10, size=n_train + n_test)
    x = (centers[y] + rng.normal(0.0, 1.0, size=(len(y), 20))).astype("float32")
    return x[:n_train], y[:n_train].astype("int64"), x[n_train:], y[n_train:].astype("int64")


def serve(resolver: tf.distribute.cluster_resolver.TFConfigClusterResolver) -> None:
    """A worker or ps: host this task's server until Phalanx stops it."""
    print(f"[{resolver.task_type}-{resolver.task_id}] serving", flush=True)
    server = tf.distribute.Server(
        resolver.cluster_spec(),
        job_name=resolver.task_type,
        task_index=resolver.task_id,
        protocol=resolver.rpc_layer or "grpc",
        start=True,
    )
    server.join()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.1)
    args = parser.parse_args()

    os.environ.setdefault("GRPC_FAIL_FAST", "use_caller")  # fail fast if a server is not up yet
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if resolver.task_type in ("worker", "ps"):
        serve(resolver)
        return

    strategy = tf.distribute.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    x_train, y_train, x_test, y_test = make_data()

    with strategy.scope():  # plain tf.Variables: they are placed on the parameter servers
        w1 = tf.Variable(tf.random.normal([20, 64], stddev=0.2, seed=1), name="w1")
        b1 = tf.Variable(tf.zeros([64]), name="b1")
        w2 = tf.Variable(tf.random.normal([64, 10], stddev=0.2, seed=2), name="w2")
        b2 = tf.Variable(tf.zeros([10]), name="b2")
    variables = [w1, b1, w2, b2]

    def logits_of(x: tf.Tensor) -> tf.Tensor:
        return tf.matmul(tf.nn.relu(tf.matmul(x, w1) + b1), w2) + b2

    def dataset_fn() -> tf.data.Dataset:
        return (
            tf.data.Dataset.from_tensor_slices((x_train, y_train))
            .shuffle(len(x_train), seed=3)
            .repeat()
            .batch(args.batch_size)
            .prefetch(2)
        )

    per_worker_iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))

    @tf.function
    def train_step(iterator: tf.data.Iterator) -> tf.Tensor:
        def step_fn(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(
                    tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits_of(x))
                )
            for var, grad in zip(variables, tape.gradient(loss, variables), strict=True):
                var.assign_sub(args.lr * grad)
            return loss

        x, y = next(iterator)
        return strategy.run(step_fn, args=(x, y))

    logger = Task.current_task().get_logger()
    workers = len(resolver.cluster_spec().as_dict().get("worker", []))
    print(f"[chief] coordinating {workers} workers, {args.steps} steps", flush=True)
    report_every = max(args.steps // 5, 1)
    for start in range(0, args.steps, report_every):
        losses = [coordinator.schedule(train_step, args=(per_worker_iterator,)) for _ in range(report_every)]
        coordinator.join()
        loss = float(np.mean([r.fetch() for r in losses]))
        accuracy = float(np.mean(np.argmax(logits_of(x_test).numpy(), axis=1) == y_test))
        step = start + report_every
        logger.report_scalar("loss", "chief", value=loss, iteration=step)
        logger.report_scalar("accuracy", "test", value=accuracy, iteration=step)
        print(f"[chief] step {step}: loss {loss:.4f} test accuracy {accuracy:.3f}", flush=True)
    print(f"final test accuracy: {accuracy:.3f}", flush=True)
    Task.current_task().flush()


if __name__ == "__main__":
    main()
