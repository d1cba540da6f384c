"""`phalanx serve` as a user runs it: a real process on a port it bound itself, over a registry
holding a model trained here on sklearn's digits and saved through save_model's export."""

from __future__ import annotations

import io
import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")
pytest.importorskip("sklearn")

from tests.integration.serving.serveproc import Served, get_json, post, start_serve, stop_serve  # noqa: E402

from phalanx.config import Settings  # noqa: E402
from phalanx.domain import Event, EventKind  # noqa: E402
from phalanx.registry.checker import check_in_process  # noqa: E402
from phalanx.registry.service import Registry  # noqa: E402
from phalanx.store import open_store  # noqa: E402
from phalanx.tracking.models import export_model  # noqa: E402


def _digits() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    data = load_digits()
    return (data.data / 16.0).astype(np.float32), data.target.astype(np.int64)


def _train(x: np.ndarray, y: np.ndarray) -> Any:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    for _ in range(60):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(xt), yt).backward()
        opt.step()
    return model


def _save(home: Path, model: Any, example: np.ndarray) -> str:
    """An experiment holding the model as save_model leaves it after ingest (file + MODEL record)."""
    store = open_store(Settings(home=home))
    exp = store.create_experiment(name="digits", project="p").id
    exported = export_model(model, "digits", torch.from_numpy(example), home / "export")
    assert exported.onnx is not None
    path = f"models/{exported.onnx.name}"
    store.artifact_store.put_file(exp, path, exported.onnx)  # type: ignore[union-attr]
    record = {
        "name": exported.onnx.name,
        "format": "onnx",
        "path": path,
        "size": exported.onnx.stat().st_size,
        "metadata": exported.onnx_metadata,
    }
    store.write_events([Event(exp, EventKind.MODEL, record)])
    store.close()
    return exp


@pytest.fixture(scope="module")
def digits_served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, bytes, np.ndarray]]:
    """One trained, registered and served model for the module (training and export take seconds)."""
    phalanx_home = tmp_path_factory.mktemp("serve-digits")
    x, y = _digits()
    exp = _save(phalanx_home, _train(x, y), x[:2])
    store = open_store(Settings(home=phalanx_home))
    registry = Registry(store, check_in_process)
    version = registry.register(exp, "digits")
    registry.set_alias("digits", "prod", version.version)
    data = registry.read_bytes(version)
    store.close()
    served = start_serve(phalanx_home, "digits@prod", "--max-wait-ms", "1")
    try:
        yield served, data, x
    finally:
        stop_serve(served.proc)


def _npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()


def test_served_predictions_equal_in_process_onnx_runtime_on_the_digits(
    digits_served: tuple[Served, bytes, np.ndarray],
) -> None:
    import onnxruntime as ort

    served, data, x = digits_served
    assert len(x) >= 1000
    expected = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
    got = []
    for start in range(0, len(x), 200):  # JSON, in requests of 200 rows
        body = json.dumps({"inputs": x[start : start + 200].tolist()}).encode()
        status, headers, raw = post(served, "/v1/models/digits:predict", body)
        assert status == 200, raw
        doc = json.loads(raw)
        assert doc["version"] == 1 and headers["x-model-version"] == "1"
        got.append(np.asarray(doc["outputs"]["output"], dtype=np.float32))
    assert float(np.max(np.abs(np.concatenate(got) - expected))) <= 1e-5
    status, headers, raw = post(  # all of them at once, as .npy both ways
        served, "/v1/models/digits:predict", _npy(x), "application/x-npy", "application/x-npy"
    )
    assert status == 200 and headers["x-model-version"] == "1"
    assert float(np.max(np.abs(np.load(io.BytesIO(raw)) - expected))) <= 1e-5
    accuracy = float((expected.argmax(1) == _digits()[1]).mean())
    assert accuracy > 0.8  # a trained model, not noise


def test_a_wrong_shape_or_dtype_is_a_422_naming_the_input(
    digits_served: tuple[Served, bytes, np.ndarray],
) -> None:
    served, _, x = digits_served
    cases = [
        (_npy(x[:3, :10]), "application/x-npy", "float32[3, 10]"),
        (_npy(x[:3].astype(np.float64)), "application/x-npy", "float64[3, 64]"),
        (json.dumps({"inputs": x[0].tolist()}).encode(), "application/json", "float32[64]"),
        (
            json.dumps({"inputs": {"pixels": x[:1].tolist()}}).encode(),
            "application/json",
            "unknown input 'pixels'",
        ),
        (json.dumps({"inputs": [["a"] * 64]}).encode(), "application/json", "not a rectangular array"),
    ]
    for body, content_type, detail in cases:
        status, _, raw = post(served, "/v1/models/digits:predict", body, content_type)
        assert status == 422, raw
        message = json.loads(raw)["message"]
        assert "'input'" in message or "pixels" in message
        assert "float32[?, 64]" in message and detail in message
    health = get_json(served, "/healthz")
    assert (health["ok"], health["version"]) == (True, 1)
    with urllib.request.urlopen(f"{served.url}/metrics", timeout=60) as r:  # Prometheus text
        text = r.read().decode()
    assert 'phalanx_serve_requests_total{model="digits",status="422",version="-"} 5.0' in text
    assert 'phalanx_serve_model_version{model="digits"} 1.0' in text


def test_another_models_name_is_a_404_naming_the_served_one(
    digits_served: tuple[Served, bytes, np.ndarray],
) -> None:
    served, _, x = digits_served
    body = json.dumps({"inputs": x[:1].tolist()}).encode()
    status, _, raw = post(served, "/v1/models/cats:predict", body)
    assert status == 404, raw
    assert "serves 'digits', not 'cats'" in json.loads(raw)["message"]
    described = get_json(served, "/v1/models/digits")  # GET of the model's own path is its signature
    assert described["model"] == "digits" and described["signature"]["inputs"][0]["name"] == "input"
