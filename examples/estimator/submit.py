"""Seed 004 from Python: the PyTorch DDP example on 2 nodes x 2 processes, submitted as an estimator.

    python examples/estimator/submit.py [--epochs 12]

It submits examples/pytorch-ddp/train.py (which saves its model with task.save_model), waits while
streaming every process's console, then prints the run's metrics and checks the ONNX model it
exported: downloaded from the run and scored on the digits test set with onnxruntime.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from phalanx import Experiment, PyTorch

DDP_EXAMPLE = Path(__file__).resolve().parent.parent / "pytorch-ddp"
MODEL = "digits-mlp"


def score_onnx(path: Path) -> float:
    """Accuracy of the exported model on the same test split train.py uses."""
    import numpy as np
    import onnxruntime as ort
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    _, x_test, _, y_test = train_test_split(x / 16.0, y, test_size=0.2, random_state=0, stratify=y)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    logits = session.run(None, {name: x_test.astype(np.float32)})[0]
    return float((logits.argmax(axis=1) == y_test).mean())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=12)
    args = parser.parse_args()

    estimator = PyTorch(
        source_directory=DDP_EXAMPLE,
        entry_script="train.py",
        script_params={"--epochs": args.epochs, "--lr": 0.01, "--batch-size": 32},
        node_count=2,
        process_count_per_node=2,
        distributed_backend="gloo",
    )
    run = Experiment("pytorch-ddp-estimator", project="examples").submit(estimator, tags=["estimator", "ddp"])
    print(f"submitted experiment {run.id}: {run.get_status()}", flush=True)
    details = run.wait_for_completion(show_output=True)
    print(f"experiment {run.id} {details['status']} in {details['duration']:.1f} s")

    for title, series in sorted(run.get_metrics().items()):
        last = ", ".join(f"{name} {s['values'][-1]:.4f}" for name, s in sorted(series.items()) if s["values"])
        print(f"metric {title}: {last}")

    models = {m["name"]: m for m in run.get_models()}
    for name, model in sorted(models.items()):
        check = model["metadata"].get("check")
        verdict = f", onnxruntime check max diff {check['max_abs_diff']:.2g}" if check else ""
        print(f"model {name}: {model['format']}, {model['size']} bytes from {model['replica']}{verdict}")
    if f"{MODEL}.onnx" not in models:
        print(f"error: the run saved no {MODEL}.onnx", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as folder:
        onnx_file = run.download_file(f"{MODEL}.onnx", Path(folder) / f"{MODEL}.onnx")
        print(f"ONNX model {MODEL}.onnx: test accuracy {score_onnx(onnx_file):.4f} with onnxruntime")
    return 0


if __name__ == "__main__":
    sys.exit(main())
