"""Synchronous data-parallel training with tf.distribute.MultiWorkerMirroredStrategy.

Phalanx sets TF_CONFIG for each replica (the master is the `chief`, then `worker` 0..n-1), so the
strategy finds its peers with no code here. Keras 3's `model.fit` fails under this strategy
(keras-team/keras#20585), so the loop is written out: `strategy.run` over a distributed dataset.
The data is synthesised (ten Gaussian classes): nothing is downloaded.
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np
import tensorflow as tf

from phalanx import Task


def make_data(n_train: int = 2400, n_test: int = 600, seed: int = 0) -> tuple[np.ndarray, ...]:
    """Ten classes in 20 dimensions, the same on every replica (same seed)."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(0.0, 1.0, size=(10, 20))
    y = rng.integers(0, 10, size=n_train + n_test)
    x = (centers[y] + rng.normal(0.0, 1.0, size=(len(y), 20))).astype("float32")
    return x[:n_train], y[:n_train].astype("int64"), x[n_train:], y[n_train:].astype("int64")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32, help="per replica")
    parser.add_argument("--lr", type=float, default=0.01)
    args = parser.parse_args()

    task_info = json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {})
    me = f"{task_info.get('type', 'local')}-{task_info.get('index', 0)}"
    is_chief = task_info.get("type", "chief") == "chief"

    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    replicas = strategy.num_replicas_in_sync
    global_batch = args.batch_size * replicas

    x_train, y_train, x_test, y_test = make_data()
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    dataset = (
        tf.data.Dataset.from_tensor_slices((x_train, y_train))
        .shuffle(len(x_train), seed=1, reshuffle_each_iteration=True)
        .batch(global_batch, drop_remainder=True)
        .with_options(options)
    )
    dist_dataset = strategy.experimental_distribute_dataset(dataset)

    with strategy.scope():
        model = tf.keras.Sequential(
            [
                tf.keras.Input(shape=(20,)),
                tf.keras.layers.Dense(64, activation="relu"),
                tf.keras.layers.Dense(10),
            ]
        )
        optimizer = tf.keras.optimizers.Adam(args.lr)
        loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction=tf.keras.losses.Reduction.NONE
        )

    def step_fn(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            per_example = loss_fn(y, model(x, training=True))
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    @tf.function
    def train_step(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        per_replica = strategy.run(step_fn, args=(x, y))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    logger = Task.current_task().get_logger()
    print(f"[{me}] {replicas} replicas in sync, global batch {global_batch}", flush=True)
    for epoch in range(args.epochs):
        total, steps = 0.0, 0
        for x, y in dist_dataset:
            total += float(train_step(x, y))
            steps += 1
        loss = total / max(steps, 1)
        logits = model(x_test, training=False)
        accuracy = float(np.mean(np.argmax(logits.numpy(), axis=1) == y_test))
        logger.report_scalar("loss", me, value=loss, iteration=epoch)
        if is_chief:
            logger.report_scalar("accuracy", "test", value=accuracy, iteration=epoch)
        print(f"[{me}] epoch {epoch}: loss {loss:.4f} test accuracy {accuracy:.3f}", flush=True)
    if is_chief:
        print(f"final test accuracy: {accuracy:.3f}", flush=True)
    Task.current_task().flush()


if __name__ == "__main__":
    main()
