"""An experiment with its own venv (`build:`) saves a model through task.save_model: the replica runs
with the standard-library-only SDK copy on its PYTHONPATH and its own torch, onnx and onnxruntime, and
both files (weights and the ONNX export, checked with onnxruntime) reach the store.

The venv (torch from the local wheel, about a minute to build) is cached with the other framework
venvs (see test_framework_examples.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.support.cli import phalanx_cli

from .test_framework_examples import home

__all__ = ["home"]  # the fixture: PHALANX_HOME with the shared venv cache

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

TRAIN = """\
import sys
import torch
from phalanx import Task
try:
    import pydantic  # Phalanx's own dependency: not in this venv
    sys.exit("pydantic importable: not the experiment's own venv")
except ImportError:
    pass
task = Task.current_task()
model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
task.save_model(model, "tiny", example_input=torch.zeros(1, 4))
print("saved in", sys.prefix, flush=True)
"""

PACKAGES = ["torch==2.13.0", "onnx==1.23.2", "onnxruntime==1.31.1", "onnxscript==0.7.2"]


def test_an_experiment_with_a_build_section_saves_an_onnx_model(home: Path, tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(TRAIN)
    packages = "".join(f"    - {p}\n" for p in PACKAGES)
    spec = tmp_path / "polyaxonfile.yml"
    spec.write_text(
        f"version: 1\nkind: experiment\nname: build-model\nbuild:\n  pip_packages:\n{packages}"
        "run:\n  cmd: python train.py\n"
    )
    done = phalanx_cli("run", "-f", spec, "-o", "json")  # in this process: its replica is a real process
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    exp_id = json.loads(done.stdout)["id"]
    logs = phalanx_cli("logs", exp_id).stdout
    assert "saved in" in logs and str(home / "venvs") in logs, logs
    models = json.loads(phalanx_cli("models", exp_id, "-o", "json").stdout)
    formats = {m["name"]: m["format"] for m in models}
    assert formats == {"tiny.pt": "pytorch", "tiny.onnx": "onnx"}, models
    onnx = next(m for m in models if m["format"] == "onnx")
    assert onnx["metadata"]["check"]["passed"] is True
