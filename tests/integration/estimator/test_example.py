"""examples/estimator/submit.py, as a user runs it: the PyTorch DDP example on 2 nodes x 2 processes
from Python, its metrics, and its ONNX model (listed and downloaded with `phalanx models`)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.conftest import REPO
from typer.testing import CliRunner

from phalanx.cli.app import app
from phalanx.cli.main import _register

pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")

PHALANX = [sys.executable, "-m", "phalanx.cli.main"]
CLI = CliRunner()
_register()


def _supervisors(home: Path) -> list[int]:
    """Supervisors submit() started under this PHALANX_HOME that are still running."""
    found = []
    for submitted in (home / "runs").glob("*/submit.json"):
        pid = int(json.loads(submitted.read_text())["supervisor_pid"])
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"PHALANX_HOME={home}".encode() in environ:
            found.append(pid)
    return found


@pytest.fixture
def example_run(phalanx_home: Path) -> Iterator[subprocess.CompletedProcess[str]]:
    """Run the example once. Two epochs keep it short on two shared cores (4 ranks on 2 cores spend
    most of an epoch waiting on each other in gloo) and score about 0.92, well above the 0.85 asked
    below and far above an untrained model's 0.1."""
    try:
        yield subprocess.run(
            [sys.executable, str(REPO / "examples" / "estimator" / "submit.py"), "--epochs", "2"],
            cwd=phalanx_home,
            capture_output=True,
            text=True,
            timeout=240,
        )
    finally:
        for pid in _supervisors(phalanx_home):  # only if the example died half-way
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)


def test_submit_example_trains_from_python_and_exports_a_working_onnx_model(
    example_run: subprocess.CompletedProcess[str], phalanx_home: Path, tmp_path: Path
) -> None:
    out = example_run.stdout
    assert example_run.returncode == 0, f"{out}\n{example_run.stderr}"
    experiment_id = re.search(r"submitted experiment ([0-9a-f]{12})", out)
    assert experiment_id, out
    run_id = experiment_id.group(1)

    # the console of all four processes, streamed by wait_for_completion(show_output=True)
    for replica, local_rank in [("master", 0), ("master", 1), ("worker-0", 0), ("worker-0", 1)]:
        assert f"[{replica}] [{local_rank}] rank " in out
    assert f"experiment {run_id} succeeded" in out
    # metrics: one series per process
    accuracy = re.search(r"metric accuracy: (.*)", out)
    assert accuracy and accuracy.group(1).count("worker 0") == 4, out
    assert "metric loss:" in out
    # the ONNX model, downloaded from the run and scored with onnxruntime
    score = re.search(r"ONNX model digits-mlp.onnx: test accuracy ([0-9.]+)", out)
    assert score and float(score.group(1)) >= 0.85, out

    listed = subprocess.run(
        [*PHALANX, "models", run_id, "-o", "json"], capture_output=True, text=True, timeout=60, check=True
    )
    models = {m["name"]: m for m in json.loads(listed.stdout)}
    assert set(models) == {"digits-mlp.onnx", "digits-mlp.pt"}
    onnx_model = models["digits-mlp.onnx"]
    assert (onnx_model["format"], onnx_model["replica"]) == ("onnx", "master")
    assert onnx_model["metadata"]["check"]["passed"] is True
    assert models["digits-mlp.pt"]["format"] == "pytorch"

    # the rest in-process (the same typer app; a `phalanx` start costs seconds on a loaded machine)
    table = CLI.invoke(app, ["models", run_id[:6]])
    assert table.exit_code == 0, table.output
    assert re.search(r"digits-mlp\.onnx\s+onnx\s+.*master\s+passed", table.output), table.output

    fetched = CLI.invoke(app, ["models", run_id, "--download", "digits-mlp", "-d", str(tmp_path)])
    assert fetched.exit_code == 0, fetched.output
    assert sorted(Path(p).name for p in fetched.output.split()) == ["digits-mlp.onnx", "digits-mlp.pt"]
    session = ort.InferenceSession(str(tmp_path / "digits-mlp.onnx"), providers=["CPUExecutionProvider"])
    assert session.get_inputs()[0].shape[1] == 64

    missing = CLI.invoke(app, ["models", run_id, "--download", "nope"])
    assert missing.exit_code == 2
    assert "has no model 'nope'" in missing.output
    assert not _supervisors(phalanx_home)
