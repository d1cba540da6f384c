"""The pure parts both doors' Run share (phalanx.run_api), and the registry's JSON on both doors:
which stored file a name means, where a download goes (never half-written), which saved model
``register_model(model_path=...)`` names, and a server's version read back rendering the very
``-o json`` the local registry renders."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from phalanx.domain import Experiment, ExperimentStatus
from phalanx.errors import NotFound, UsageError
from phalanx.registry.remote import model_of, version_of
from phalanx.registry.service import model_json, version_json
from phalanx.run_api import details_json, download_target, register_source, resolve_file, write_whole
from phalanx.server.registry_schemas import ModelVersionOut, RegisteredModelOut
from phalanx.store.registry_records import ModelVersion, RegisteredModel

NAMES = ["artifacts/notes.txt", "models/tiny.onnx", "models/tiny.pt"]
NAMED = [("outputs/notes.txt", "artifacts/notes.txt"), ("tiny.onnx", "models/tiny.onnx")]


def test_a_file_is_named_by_its_path_or_its_records_name() -> None:
    assert resolve_file("r1", "models/tiny.pt", NAMES, NAMED) == "models/tiny.pt"
    assert resolve_file("r1", "outputs/notes.txt", NAMES, NAMED) == "artifacts/notes.txt"
    with pytest.raises(NotFound, match=r"run r1 has no file 'nope'; files: artifacts/notes.txt, models"):
        resolve_file("r1", "nope", NAMES, NAMED)
    with pytest.raises(NotFound, match="files: none yet"):
        resolve_file("r1", "outputs/notes.txt", [], NAMED)


def test_a_download_goes_to_a_file_or_into_a_folder_whole(tmp_path: Path) -> None:
    assert download_target("a/b/notes.txt", tmp_path) == tmp_path / "notes.txt"
    assert download_target("a/b/notes.txt", tmp_path / "x.txt") == tmp_path / "x.txt"
    target = write_whole(tmp_path / "sub" / "x.txt", [b"ab", b"cd"])
    assert target.read_bytes() == b"abcd"

    def chunks() -> Iterator[bytes]:
        yield b"half"
        raise OSError("connection lost")

    with pytest.raises(OSError):
        write_whole(tmp_path / "y.txt", chunks())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sub"]  # nothing half-written left


MODELS = [
    {"name": "tiny.pt", "path": "models/tiny.pt", "metadata": {"model": "tiny"}},
    {"name": "tiny.onnx", "path": "models/tiny.onnx", "metadata": {"model": "tiny"}},
]


def test_register_model_names_a_saved_model_by_path_or_name() -> None:
    assert register_source("r1", None, MODELS) == "r1"
    assert register_source("r1", "models/tiny.onnx", MODELS) == "r1/tiny.onnx"
    assert register_source("r1", "tiny.onnx", MODELS) == "r1/tiny.onnx"
    with pytest.raises(UsageError, match=r"saved no model at 'x.onnx' \(saved models: models/tiny.pt,"):
        register_source("r1", "x.onnx", MODELS)


def test_details_have_a_duration_only_once_started() -> None:
    e = Experiment(id="e1", name="n", project="p", status=ExperimentStatus.SUCCEEDED)
    doc = details_json(e, [], now=10.0)
    assert doc["duration"] is None and doc["replicas"] == [] and doc["status"] == "succeeded"
    started = Experiment(id="e1", name="n", project="p", status=ExperimentStatus.RUNNING, started_at=4.0)
    assert details_json(started, [], now=10.0)["duration"] == 6.0


def test_a_servers_version_renders_the_local_json() -> None:
    v = ModelVersion(
        name="tiny",
        version=3,
        experiment_id="e1",
        source="tiny.onnx",
        path="tiny/abc.onnx",
        sha256="abc",
        size=12,
        signature={"inputs": []},
        lineage={"parity": {"passed": True}},
        description="d",
        tags={"k": "v"},
        created_at=1.5,
        aliases=["prod"],
    )
    assert version_json(version_of(ModelVersionOut.of(v).model_dump(mode="json"))) == version_json(v)
    m = RegisteredModel("tiny", None, {}, 1.0, 2.0, 3, {"prod": 3}, "A")
    assert model_json(model_of(RegisteredModelOut.of(m).model_dump(mode="json"))) == model_json(m)
