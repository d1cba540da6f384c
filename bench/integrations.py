"""What each integration costs a training step: TensorBoard capture, PhalanxLogger, the Keras and
Hugging Face callbacks, and MLflow's equivalents, in one run.

    .venv/bin/python bench/integrations.py [--steps 2000] [--repeat 5] [--skip-mlflow] [--json FILE]

The anchor is one training step of a small MLP on CPU (batch 64, 32 -> 64 -> 1, SGD): the cheapest
step a real job has, so the ratios are upper bounds. For each integration the extra time of the
calls it adds per step is measured directly (many calls, median of ``--repeat`` rounds), since a
difference of two whole training runs is below the noise of a shared machine:

- TensorBoard: the report the wrapper adds to each ``SummaryWriter.add_scalar`` (TensorBoard's own
  call is shown beside it, as a scale: it is not Phalanx's cost);
- Lightning: ``PhalanxLogger.log_metrics`` of two metrics (what ``self.log`` of loss and accuracy
  costs it each step), against no logger at all;
- Keras: ``PhalanxCallback.on_train_batch_end`` + ``on_epoch_end`` per batch, against no callback;
- Hugging Face: ``PhalanxCallback.on_log`` of a Trainer's step log (loss, grad_norm, learning_rate,
  epoch: ``logging_steps=1``, the most a Trainer logs);
- MLflow, the same calls its integrations make per step: ``MlflowClient.log_batch`` of two metrics
  (``MLFlowLogger.log_metrics``; ``mlflow.pytorch.autolog`` logs through the same logger) and
  ``mlflow.log_metrics`` of the Trainer's four (transformers' ``MLflowCallback.on_log``), synchronous
  (their default) and ``synchronous=False``, to a local SQLite store, in MLflow's own venv (bench/
  tracking.py builds it once; ``--skip-mlflow`` and ``--smoke`` leave it out).

The process reports as a replica of an experiment (PHALANX_* set, a temporary PHALANX_HOME), so a
call only appends to memory as in a real run; the background thread writes the spool meanwhile.
Target (issue 28): under 1 % of the step. Not run by the tests.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# bench/queue.py would shadow the standard library's queue (torch imports it) for a script run from here
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]


def _as_replica(home: Path) -> None:
    os.environ.update(
        PHALANX_HOME=str(home),
        PHALANX_EXPERIMENT_ID="bench0000000",
        PHALANX_REPLICA="master",
        PHALANX_ROLE="master",
        PHALANX_INDEX="0",
        PHALANX_RANK="0",
        PHALANX_SPOOL=str(home / "spool" / "bench0000000"),
        PHALANX_CAPTURED="1",
        KERAS_BACKEND="torch",
    )


def _per_call(fn: Callable[[int], Any], calls: int, repeat: int) -> float:
    """Median seconds per call of ``fn(i)`` over ``repeat`` rounds of ``calls`` calls."""
    rounds = []
    for _ in range(repeat):
        start = time.perf_counter()
        for i in range(calls):
            fn(i)
        rounds.append((time.perf_counter() - start) / calls)
    return statistics.median(rounds)


MLFLOW_SCRIPT = """
import statistics, sys, tempfile, time
import mlflow
from mlflow.entities import Metric

calls, repeat = int(sys.argv[1]), int(sys.argv[2])
mlflow.set_tracking_uri(f"sqlite:///{tempfile.mkdtemp()}/mlflow.db")
run = mlflow.start_run()
client = mlflow.MlflowClient()
trainer_log = {"loss": 0.5, "grad_norm": 1.0, "learning_rate": 0.01, "epoch": 0.1}


def lightning(i, sync):  # MLFlowLogger.log_metrics: one log_batch of the step's metrics
    now = int(time.time() * 1000)
    metrics = [Metric("train_loss", 0.5, now, i), Metric("train_acc", 0.9, now, i)]
    client.log_batch(run.info.run_id, metrics=metrics, synchronous=sync)


def hf(i, sync):  # transformers' MLflowCallback.on_log
    mlflow.log_metrics(trainer_log, step=i, synchronous=sync)


out = {}
for name, fn in (("lightning", lightning), ("hf", hf)):
    for sync in (True, False):
        rounds = []
        for _ in range(repeat):
            start = time.perf_counter()
            for i in range(calls):
                fn(i, sync)
            rounds.append((time.perf_counter() - start) / calls)
        out[f"{name} {'sync' if sync else 'async'}"] = statistics.median(rounds)
mlflow.flush_async_logging()
mlflow.end_run()
print(repr(out))
"""


def _mlflow(calls: int, repeat: int) -> dict[str, float]:
    """Seconds per call of MLflow's per-step logging, measured in MLflow's own venv. Its async
    variant is timed per call as the training loop sees it (the queue drains meanwhile)."""
    import ast
    import subprocess

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from tracking import mlflow_python

    sys.path.pop(0)
    done = subprocess.run(
        [str(mlflow_python()), "-c", MLFLOW_SCRIPT, str(calls), str(repeat)],
        capture_output=True, text=True, check=True, timeout=1800,
    )  # fmt: skip
    figures: dict[str, float] = ast.literal_eval(done.stdout.strip().splitlines()[-1])
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--skip-mlflow", action="store_true", help="leave MLflow's equivalents out")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, to check the bench runs")
    args = parser.parse_args()
    if args.smoke:
        args.steps, args.repeat, args.skip_mlflow = 20, 1, True  # MLflow's venv is built on first use
    home = Path(tempfile.mkdtemp(prefix="phalanx-bench-integrations-"))
    _as_replica(home)

    import torch

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 32), torch.randn(64, 1)

    def step(_: int) -> None:
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()  # type: ignore[no-untyped-call]
        opt.step()

    # TensorBoard: the same add_scalar, captured and not
    from torch.utils.tensorboard import SummaryWriter

    from phalanx.integrations import tensorboard
    from phalanx.integrations.huggingface import PhalanxCallback as HfCallback
    from phalanx.integrations.keras import PhalanxCallback
    from phalanx.integrations.lightning import PhalanxLogger
    from phalanx.tracking.tensorboard import _report as report_captured

    writer = SummaryWriter(log_dir=str(home / "tb"))
    logger = PhalanxLogger()
    callback = PhalanxCallback()
    logs = {"loss": 0.5, "mae": 0.4}

    def keras_hooks(i: int) -> None:  # the callback's per-batch hooks (one epoch end every 100 batches)
        callback.on_train_batch_end(i, logs)
        if i % 100 == 99:
            callback.on_epoch_end(i // 100, logs)

    from transformers import TrainerControl, TrainerState, TrainingArguments

    hf_callback = HfCallback()
    hf_args = TrainingArguments(str(home / "hf"), report_to="none", use_cpu=True)
    hf_state, hf_control = TrainerState(), TrainerControl()
    trainer_log = {"loss": 0.5, "grad_norm": 1.0, "learning_rate": 0.01, "epoch": 0.1}

    def hf_log(i: int) -> None:  # what the Trainer calls each logging step
        hf_state.global_step = i
        hf_callback.on_log(hf_args, hf_state, hf_control, logs=trainer_log)

    def captured(i: int) -> None:
        # what the wrapper adds to each add_scalar: the report (a difference of two add_scalar
        # timings is far below their noise on a shared machine)
        report_captured("loss", 0.5, i)

    cases: dict[str, Callable[[int], Any]] = {
        "training step": step,
        "tensorboard add_scalar itself (not captured)": lambda i: writer.add_scalar("loss", 0.5, i),
        "tensorboard capture (per add_scalar)": captured,
        "lightning PhalanxLogger.log_metrics": lambda i: logger.log_metrics(
            {"train_loss": 0.5, "train_acc": 0.9}, i
        ),
        "keras PhalanxCallback (per batch)": keras_hooks,
        "hf PhalanxCallback.on_log (4 values)": hf_log,
    }
    # the cases alternate (A B C ... A B C ...), so a load swing on a shared machine touches them alike
    rounds: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.repeat):
        for name, fn in cases.items():
            if fn is captured:
                tensorboard.capture()
            rounds[name].append(_per_call(fn, args.steps, 1))
            if fn is captured:
                tensorboard.stop()
    writer.close()
    medians = {name: statistics.median(values) for name, values in rounds.items()}
    step_s = medians.pop("training step")
    rows: dict[str, float] = medians
    if not args.skip_mlflow:  # fewer calls: a synchronous MLflow call costs milliseconds
        mlflow = _mlflow(max(20, args.steps // 10), args.repeat)
        rows["mlflow lightning MLFlowLogger (log_batch, sync)"] = mlflow["lightning sync"]
        rows["mlflow lightning MLFlowLogger (async)"] = mlflow["lightning async"]
        rows["mlflow hf MLflowCallback (log_metrics, sync)"] = mlflow["hf sync"]
        rows["mlflow hf MLflowCallback (async)"] = mlflow["hf async"]

    print(f"training step (MLP 32-64-1, batch 64, 1 thread): {step_s * 1e6:.1f} us")
    print(f"{'integration':50} {'extra us/step':>14} {'% of step':>10}")
    for name, extra in rows.items():
        print(f"{name:50} {extra * 1e6:14.2f} {100 * extra / step_s:9.3f}%")
    worst = max(v for k, v in rows.items() if "itself" not in k and "mlflow" not in k) / step_s
    verdict = "met" if worst < 0.01 else "NOT met"
    print(f"target < 1 % of the step (Phalanx's): {verdict} (worst {100 * worst:.3f} %)")
    load = os.getloadavg()
    print(f"({args.repeat} alternating rounds; load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f})")
    if args.json:
        figures = {"step_us": step_s * 1e6, **{k: v * 1e6 for k, v in rows.items()}}
        args.json.write_text(json.dumps(figures, indent=2))
    sys.stdout.flush()
    os._exit(0)  # the reporters' threads would write spools of a bench experiment no one ingests


if __name__ == "__main__":
    main()
