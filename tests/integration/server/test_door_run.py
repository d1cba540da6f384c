"""The Run a server submit returns is the Run: `Experiment(..., server=URL).submit(est)` against a
real `phalanx server` on loopback gives a run whose files, downloads, models and logs are what the
local ``Run`` of the same job (read on the server's machine, from its store) answers, and whose
``register_model`` registers on the server, where `phalanx models ls` from a laptop home (after
`phalanx login`) finds it, while `--local` keeps the laptop's empty registry.

One server and one short experiment (a text artifact, a tiny torch model saved with its ONNX copy)
for the whole module: the experiment is what costs (torch's import and ONNX export in the replica).
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.integration.server.serverproc import Server, start_server, stop_server, supervisors_gone
from tests.integration.server.test_remote_commands import TOKEN, ok, phalanx

from phalanx.config import Settings
from phalanx.estimators import Estimator, Experiment
from phalanx.estimators.remote import RemoteRun
from phalanx.runs import Run

pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

SCRIPT = """
import io
import torch
from phalanx import Run, Task

print("training the tiny model", flush=True)
torch.manual_seed(0)
Run.get_context().upload_file("outputs/notes.txt", io.BytesIO(b"a small file artifact"))
Task.current_task().save_model(torch.nn.Linear(4, 2), "tiny", example_input=torch.randn(3, 4))
print("saved", flush=True)
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    home = tmp_path_factory.mktemp("server-home")
    s = start_server(home, token=TOKEN)
    try:
        yield s
        supervisors_gone(s)
    finally:
        stop_server(s.proc)


@pytest.fixture(scope="module")
def finished(server: Server, tmp_path_factory: pytest.TempPathFactory) -> tuple[RemoteRun, Run]:
    """The experiment, submitted from Python to the server and ended: its RemoteRun, and the local
    Run of the same id on the server's own store."""
    project = tmp_path_factory.mktemp("project")
    (project / "train.py").write_text(textwrap.dedent(SCRIPT))
    mp = pytest.MonkeyPatch()
    mp.setenv("PHALANX_HOME", str(tmp_path_factory.mktemp("submitter-home")))
    try:
        run = Experiment("door-run", "door", server=server.url, token=TOKEN).submit(
            Estimator(source_directory=project, entry_script="train.py")
        )
    finally:
        mp.undo()
    assert isinstance(run, RemoteRun)
    details = run.wait_for_completion(timeout=300)
    assert details["status"] == "succeeded", run.get_logs()
    return run, Run(run.id, settings=Settings(home=server.home, db_url=None, artifacts_url=None))


def test_the_remote_run_reads_what_the_local_run_reads(
    finished: tuple[RemoteRun, Run], tmp_path: Path
) -> None:
    remote, local = finished
    names = remote.get_file_names()
    assert names == local.get_file_names()
    (notes,) = [n for n in names if n.endswith("notes.txt")]
    assert {m["path"] for m in local.get_models()} <= set(names)
    assert remote.get_models() == local.get_models()
    assert {m["format"] for m in remote.get_models()} == {"pytorch", "onnx"}
    assert remote.get_logs() == local.get_logs()
    assert "[master] training the tiny model" in remote.get_logs()
    assert remote.get_logs("master") == local.get_logs("master")
    assert remote.get_metrics() == local.get_metrics()
    here, there = remote.get_details(), local.get_details()
    assert {k: v for k, v in here.items() if k != "duration"} == {
        k: v for k, v in there.items() if k != "duration"
    }
    assert remote.get_status() == local.get_status() == "succeeded"
    assert remote.cancel() == "succeeded"  # an ended run is left as it is

    # a download by a file's path and by an artifact's name, the same bytes as the local Run writes
    onnx = next(m for m in remote.get_models() if m["format"] == "onnx")
    (tmp_path / "remote").mkdir()
    (tmp_path / "local").mkdir()
    for name in (notes, "notes.txt", onnx["path"]):  # a path, an artifact's name, a model's path
        got = remote.download_file(name, tmp_path / "remote")
        want = local.download_file(name, tmp_path / "local")
        assert got.name == want.name and got.read_bytes() == want.read_bytes(), name
    assert (tmp_path / "remote" / "notes.txt").read_bytes() == b"a small file artifact"
    assert not list((tmp_path / "remote").glob(".*.part"))


def test_register_model_registers_on_the_server_and_models_ls_shows_it(
    server: Server, finished: tuple[RemoteRun, Run], tmp_path: Path
) -> None:
    remote, local = finished
    onnx = next(m for m in remote.get_models() if m["format"] == "onnx")
    created: dict[str, Any] = remote.register_model("tiny-door", onnx["path"], alias="prod")
    assert (created["name"], created["version"], created["aliases"]) == ("tiny-door", 1, ["prod"])
    assert created["experiment_id"] == remote.id and created["lineage"]["parity"]["passed"] is True

    laptop = tmp_path / "laptop-home"
    ok(phalanx(laptop, "login", server.url, "--token", TOKEN))
    r = ok(phalanx(laptop, "models", "ls", "-o", "json"))
    assert r.stderr == f"phalanx: on server {server.url}\n"
    assert [(m["name"], m["latest_version"], m["aliases"]) for m in json.loads(r.stdout)] == [
        ("tiny-door", 1, {"prod": 1})
    ]
    # -o json: the same shape as on the server's own machine
    there = ok(phalanx(laptop, "models", "get", "tiny-door@prod", "-o", "json"))
    here = ok(phalanx(server.home, "models", "get", "tiny-door@prod", "-o", "json"))
    assert json.loads(there.stdout) == json.loads(here.stdout) == created

    # `models register ID` from the laptop: the server's experiment, not "no experiment"
    r = ok(phalanx(laptop, "models", "register", remote.id, "--name", "tiny-door", "-o", "json"))
    assert json.loads(r.stdout)["version"] == 2
    r = ok(phalanx(laptop, "models", "alias", "tiny-door@prod", "2"))
    assert r.stdout == "tiny-door@prod -> version 2 (was 1)\n"
    r = ok(phalanx(laptop, "models", "download", "tiny-door@prod", "-d", str(tmp_path / "dl")))
    assert Path(r.stdout.strip()).read_bytes() == local_bytes(server, "tiny-door@2")
    r = ok(phalanx(laptop, "models", remote.id, "-o", "json"))
    assert {m["name"] for m in json.loads(r.stdout)} == {m["name"] for m in remote.get_models()}
    ok(phalanx(laptop, "models", remote.id, "--download", onnx["name"], "-d", str(tmp_path / "saved")))
    saved = (tmp_path / "saved" / Path(onnx["path"]).name).read_bytes()
    assert saved == local.download_file(onnx["path"], tmp_path / "want.onnx").read_bytes()

    r = ok(phalanx(laptop, "models", "ls", "--local"))
    assert r.stderr == "phalanx: on this machine\n" and r.stdout.startswith("no registered models")


def local_bytes(server: Server, ref: str) -> bytes:
    """A version's file as the server's own machine reads it from its registry."""
    from phalanx.registry import Model
    from phalanx.store import open_store

    store = open_store(Settings(home=server.home, db_url=None, artifacts_url=None))
    return Model(ref, store=store).download(server.home / "check").read_bytes()
