"""save_model's export: the weights load back, the ONNX file stands alone and computes what PyTorch
does, a model whose export computes something else is refused, and only rank 0 saves."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")

from phalanx.errors import UsageError  # noqa: E402
from phalanx.tracking.models import ModelCheckFailed, export_model, process_rank, save_model  # noqa: E402


def _mlp() -> Any:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))


class _DriftsAfterTracing(torch.nn.Module):
    """Adds how often it has been called: the eager output (call 1) and the traced graph (call 2,
    baked in as a constant) differ by 1 - an export that silently computes something else."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 2)
        self.calls = 0

    def forward(self, x: Any) -> Any:
        self.calls += 1
        return self.linear(x) + float(self.calls)


def _run(model: Any, x: Any) -> Any:
    """The model's output on the CPU (DataParallel moves the model to cuda:0 where a GPU exists)."""
    device = next(model.parameters()).device
    with torch.no_grad():
        return model(x.to(device)).cpu()


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One export shared by the tests that only read it (the first export in a process costs seconds)."""
    folder = tmp_path_factory.mktemp("export")
    model = _mlp()
    return model, export_model(torch.nn.DataParallel(model), "digits", torch.randn(2, 64), folder)


def test_weights_are_the_unwrapped_state_dict_and_load_into_a_fresh_model(exported: Any) -> None:
    model, result = exported
    state = torch.load(result.weights)
    assert not any(k.startswith("module.") for k in state)
    fresh = _mlp()
    for p in fresh.parameters():
        torch.nn.init.zeros_(p)
    fresh.load_state_dict(state)
    x = torch.randn(3, 64)
    assert torch.allclose(fresh(x), _run(model, x), rtol=1e-4, atol=1e-5)
    assert result.weights_metadata["parameters"] == sum(p.numel() for p in model.parameters())


def test_onnx_file_stands_alone_and_matches_pytorch_for_any_batch_size(exported: Any, tmp_path: Path) -> None:
    model, result = exported
    alone = tmp_path / "copied.onnx"
    shutil.copyfile(result.onnx, alone)  # no sibling files: the weights are inside
    session = ort.InferenceSession(str(alone), providers=["CPUExecutionProvider"])
    x = torch.randn(7, 64)
    got = session.run(None, {"input": x.numpy()})[0]
    np.testing.assert_allclose(got, _run(model, x).numpy(), rtol=1e-3, atol=1e-5)


def test_onnx_metadata_records_the_check_and_the_graph(exported: Any) -> None:
    meta = exported[1].onnx_metadata
    assert meta["check"]["passed"] is True
    assert meta["check"]["max_abs_diff"] <= 1e-5
    assert (meta["check"]["rtol"], meta["check"]["atol"]) == (1e-3, 1e-5)
    assert meta["input_names"] == ["input"] and meta["output_names"] == ["output"]
    assert meta["input_shapes"] == [[2, 64]] and meta["output_shapes"] == [[2, 10]]
    assert isinstance(meta["opset"], int) and meta["opset"] >= 17
    assert meta["exporter"] in ("dynamo", "torchscript")


def test_onnx_metadata_keeps_what_re_runs_the_check_on_the_stored_file(exported: Any) -> None:
    """The registry re-checks a file before registering it: the example input and PyTorch's output
    travel in the metadata, and the check passes on the file as saved and fails on an altered one."""
    import hashlib

    from phalanx.registry.parity import recheck

    result = exported[1]
    meta = result.onnx_metadata
    data = result.onnx.read_bytes()
    assert meta["sha256"] == hashlib.sha256(data).hexdigest()
    assert [a["shape"] for a in meta["parity"]["inputs"]] == [[2, 64]]
    assert recheck(data, meta).passed
    assert not recheck(data[: len(data) // 2], meta).passed


def test_an_export_that_computes_something_else_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ModelCheckFailed, match="max abs diff 1"):
        export_model(_DriftsAfterTracing(), "drifts", torch.randn(1, 4), tmp_path)


def test_mistakes_in_the_call_are_usage_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="example_input"):
        export_model(_mlp(), "m", None, tmp_path)
    with pytest.raises(UsageError, match="example_input"):
        export_model(_mlp(), "m", [[0.0] * 64], tmp_path)
    with pytest.raises(UsageError, match=r"torch\.nn\.Module"):
        export_model(object(), "m", torch.randn(1, 64), tmp_path)
    with pytest.raises(UsageError, match="model name"):
        export_model(_mlp(), "../escape", torch.randn(1, 64), tmp_path)
    with pytest.raises(UsageError, match=r"without a \.pt/\.onnx suffix"):
        export_model(_mlp(), "m.onnx", torch.randn(1, 64), tmp_path)


def test_weights_only_needs_no_example_input(tmp_path: Path) -> None:
    result = export_model(_mlp(), "weights", None, tmp_path, onnx=False)
    assert result.onnx is None and result.weights.is_file()


class _RecordingTask:
    def __init__(self) -> None:
        self.recorded: list[tuple[str, dict[str, Any]]] = []

    def _record_model_file(self, path: Path, data: dict[str, Any]) -> None:
        assert Path(path).is_file()
        self.recorded.append((Path(path).name, data))


def test_only_rank_zero_saves_unless_all_ranks(monkeypatch: pytest.MonkeyPatch) -> None:
    task = _RecordingTask()
    monkeypatch.setenv("RANK", "1")
    assert process_rank() == 1
    assert save_model(task, _mlp(), "digits", example_input=torch.randn(1, 64), onnx=False) is None
    assert task.recorded == []
    saved = save_model(task, _mlp(), "digits", example_input=None, onnx=False, all_ranks=True)
    assert saved is not None
    assert [d["name"] for d in saved] == ["digits-rank1.pt"]
    monkeypatch.setenv("RANK", "0")
    saved = save_model(task, _mlp(), "digits", onnx=False)
    assert saved is not None
    assert saved[0] == {
        "name": "digits.pt",
        "format": "pytorch",
        "path": "models/digits.pt",
        "size": saved[0]["size"],
        "metadata": saved[0]["metadata"],
    }
    assert saved[0]["metadata"]["rank"] == 0
