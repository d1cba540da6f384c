"""The model registry over REST: register (with its parity check), read, move aliases, download."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

pytest.importorskip("onnxruntime")

from phalanx.store.base import Store
from tests.support.onnx_models import random_linear, record_model, tamper

DATA = {"name": "digits", "kind": "dataset", "ref": "digits-data@3", "digest": "ab" * 32, "mode": "download"}


def _saved(store: Store, seed: int) -> str:
    exp = store.create_experiment(name=f"train-{seed}", project="p", plan={"inputs": [DATA]}).id
    record_model(store, exp, "digits", random_linear(seed))
    return exp


def test_register_read_alias_download(client: TestClient, store: Store) -> None:
    first, second = _saved(store, 1), _saved(store, 2)
    r = client.post("/api/v1/models/digits/versions", json={"experiment_id": first, "tags": {"a": "b"}})
    assert r.status_code == 201, r.text
    assert r.json()["version"] == 1 and r.json()["lineage"]["parity"]["passed"] is True
    r = client.post("/api/v1/models/digits/versions", json={"experiment_id": second[:6], "model": "digits"})
    assert r.json()["version"] == 2
    r = client.put("/api/v1/models/digits/aliases/prod", json={"version": 1})
    assert r.status_code == 200 and r.json()["version"] == 1 and r.json()["aliases"] == ["prod"]
    assert client.get("/api/v1/models/digits/aliases/prod").json()["experiment_id"] == first
    [listed] = client.get("/api/v1/models").json()
    assert (listed["name"], listed["latest_version"], listed["aliases"]) == ("digits", 2, {"prod": 1})
    detail = client.get("/api/v1/models/digits").json()
    assert [v["version"] for v in detail["versions"]] == [1, 2]
    assert detail["versions"][0]["signature"]["inputs"][0]["shape"] == [None, 64]
    assert detail["versions"][0]["lineage"]["inputs"] == [DATA]  # the dataset it was trained on
    got = client.get("/api/v1/models/digits/versions/1/file")
    assert got.status_code == 200
    assert got.content == store.artifact_store.read_bytes(first, "models/digits.onnx")  # type: ignore[attr-defined]
    assert client.delete("/api/v1/models/digits/aliases/prod").status_code == 204
    assert client.get("/api/v1/models/digits/aliases/prod").status_code == 404


def test_refusals(client: TestClient, store: Store) -> None:
    exp = _saved(store, 1)
    tamper(store, exp, "digits")
    r = client.post("/api/v1/models/digits/versions", json={"experiment_id": exp})
    assert r.status_code == 400 and "max abs diff" in r.json()["message"]
    assert client.get("/api/v1/models").json() == []
    assert client.get("/api/v1/models/nothing").status_code == 404
    other = _saved(store, 2)
    client.post("/api/v1/models/digits/versions", json={"experiment_id": other})
    r = client.put("/api/v1/models/digits/aliases/prod", json={"version": 9})
    assert r.status_code == 404 and "no version 9" in r.json()["message"]
    assert client.put("/api/v1/models/digits/aliases/3bad", json={"version": 1}).status_code == 400
