"""On a machine with a CUDA GPU (none in CI: skipped there): use_gpu and nccl reach the replica, and a
GPU model saves a checked ONNX export. Run on an H100 while this was written."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from phalanx import Experiment, PyTorch
from phalanx.runs import Run

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

SCRIPT = """
import os
import torch
import torch.distributed as dist
from phalanx import Task

dist.init_process_group("nccl")
local = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local)
print("visible", os.environ.get("CUDA_VISIBLE_DEVICES"), torch.cuda.get_device_name(local), flush=True)
task = Task.init(project_name="gpu", task_name="nccl")
torch.backends.cuda.matmul.allow_tf32 = True  # the check must still pass: it runs on a CPU copy
net = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)).cuda()
model = torch.nn.parallel.DistributedDataParallel(net, device_ids=[local])
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x, y = torch.randn(512, 64, device="cuda"), torch.randint(0, 10, (512,), device="cuda")
for step in range(20):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    task.get_logger().report_scalar("loss", "worker 00", loss.item(), step)
task.save_model(model, "gpu-mlp", example_input=x[:2])
task.close()
dist.barrier()
dist.destroy_process_group()
"""


def test_a_gpu_estimator_trains_over_nccl_and_saves_a_checked_onnx_model(
    tmp_path: Path, runs: list[Run]
) -> None:
    (tmp_path / "gpu_train.py").write_text(SCRIPT)
    est = PyTorch(tmp_path, entry_script="gpu_train.py", use_gpu=True, distributed_backend="nccl")
    run = Experiment("gpu", project="estimator-tests").submit(est)
    runs.append(run)
    out = io.StringIO()
    details = run.wait_for_completion(show_output=True, output=out, timeout=300)
    assert details["status"] == "succeeded", out.getvalue()
    assert "[master] visible " in out.getvalue()
    assert len(run.get_metrics()["loss"]["worker 00"]["steps"]) == 20
    models = {m["name"]: m for m in run.get_models()}
    assert models["gpu-mlp.onnx"]["metadata"]["check"]["passed"] is True
    assert models["gpu-mlp.pt"]["metadata"]["device"].startswith("cuda")
