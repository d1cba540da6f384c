"""Experiments whose files live on an S3 API (PHALANX_ARTIFACTS_URL=s3://bucket/prefix), against a
real S3 server on loopback: the DDP example's models and source snapshot are stored in the bucket and
served from there by the CLI and the API; a restarted group resumes from a checkpoint in the bucket;
no credential reaches the database, the run folders or the API."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from tests.integration.local.conftest import Phalanx
from tests.support import s3

from phalanx.config import Settings
from phalanx.server.app import create_app
from phalanx.server.settings import ServerSettings
from phalanx.store import open_store

REPO = Path(__file__).resolve().parents[3]


def _bucket_files(url: str, experiment_id: str) -> dict[str, bytes]:
    import fsspec

    fs, root = fsspec.core.url_to_fs(url)
    base = f"{root}/{experiment_id}"
    return {str(p)[len(base) + 1 :]: fs.cat_file(p) for p in fs.find(base)}


def _open(home: Path, url: str) -> Any:
    return open_store(Settings(home=home, artifacts_url=url))


def _no_secret_under(folder: Path) -> None:
    secret = s3.CREDENTIALS["AWS_SECRET_ACCESS_KEY"].encode()
    for path in folder.rglob("*"):
        if path.is_file():
            assert secret not in path.read_bytes(), f"the AWS secret is written in {path}"


def test_the_ddp_example_stores_its_models_and_snapshot_in_the_bucket_and_serves_them(
    phalanx_s3: Phalanx, s3_url: str, tmp_path: Path
) -> None:
    example = REPO / "examples" / "pytorch-ddp" / "polyaxonfile.yml"
    result = phalanx_s3.run("run", "-f", str(example), "--param", "epochs=2", timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    store = _open(phalanx_s3.home, s3_url)
    (exp,) = store.list_experiments().items
    in_bucket = _bucket_files(s3_url, exp.id)
    models = {m.name: m for m in store.models(exp.id)}
    assert models, "the example saves digits-mlp"
    for record in models.values():
        assert record.path in in_bucket and len(in_bucket[record.path]) == record.size
    assert "_source/source.tar.gz" in in_bucket  # the snapshot `phalanx rerun` unpacks
    local = phalanx_s3.home / "artifacts"
    assert not local.exists() or not any(p.is_file() for p in local.rglob("*")), "files went to the disk"

    # the CLI downloads a model from the bucket, byte for byte
    pt = next(r for r in models.values() if r.path.endswith(".pt"))
    got = phalanx_s3.run("models", exp.id, "--download", pt.name, "-d", str(tmp_path / "dl"), "-o", "json")
    assert got.returncode == 0, got.stderr
    (written,) = json.loads(got.stdout)
    assert Path(written["file"]).read_bytes() == in_bucket[pt.path]

    # the API serves the same bytes from the bucket (the files route a pod fetches bundles from)
    settings = Settings(home=phalanx_s3.home, artifacts_url=s3_url)
    app = create_app(ServerSettings(store=settings, poll_seconds=0.05, allowed_hosts=["testserver"]), store)
    with TestClient(app) as client:
        answer = client.get(f"/api/v1/experiments/{exp.id}/files/{pt.path}")
        assert answer.status_code == 200
        assert hashlib.sha256(answer.content).digest() == hashlib.sha256(in_bucket[pt.path]).digest()
        put = client.put(f"/api/v1/experiments/{exp.id}/files/bundle/code.tar.gz", content=b"x" * 100_000)
        assert put.status_code in (200, 201), put.text
        assert _bucket_files(s3_url, exp.id)["bundle/code.tar.gz"] == b"x" * 100_000
        shown = json.dumps(client.get(f"/api/v1/experiments/{exp.id}").json())
        assert s3.CREDENTIALS["AWS_SECRET_ACCESS_KEY"] not in shown
    store.close()
    _no_secret_under(phalanx_s3.home)


RESUMING = """
import os, signal, sys
from phalanx import Task

task = Task.init()
ckpt = task.latest_checkpoint()
state = task.load_checkpoint() if ckpt is not None else {"epoch": -1}
print(f"starts at epoch {state['epoch'] + 1}", flush=True)
for epoch in range(state["epoch"] + 1, 4):
    if epoch == 2 and ckpt is None:
        os.kill(os.getpid(), signal.SIGKILL)      # the first attempt dies after saving epoch 1
    state = {"epoch": epoch}
    task.save_checkpoint(state, step=epoch, metrics={"loss": 1.0 / (epoch + 1)})
task.flush()
"""


def test_a_restarted_experiment_resumes_from_its_checkpoint_in_the_bucket(
    phalanx_s3: Phalanx, s3_url: str, s3_server: s3.S3Server
) -> None:
    folder = phalanx_s3.tmp / "exp"
    folder.mkdir()
    (folder / "train.py").write_text(RESUMING)
    spec = phalanx_s3.spec(
        """
        version: 1
        kind: experiment
        framework: pytorch
        run:
          cmd: python train.py
          max_restarts: 1
          checkpoints:
            keep_last: 2
        """
    )
    result = phalanx_s3.run("run", "-f", str(spec))
    store = _open(phalanx_s3.home, s3_url)
    (exp,) = store.list_experiments().items
    assert result.returncode == 0, (exp.reason, result.stderr[-3000:])
    lines = [line.text for line in store.logs(exp.id)]
    seen = (lines, store.attempts(exp.id), result.stdout[-3000:])  # what the terminal showed, if lost
    assert lines.count("starts at epoch 0") == 1 and lines.count("starts at epoch 2") == 1, seen
    # the checkpoint came from the bucket: the supervisor fetched it over the S3 API
    assert s3_server.count("GET", f"/{exp.id}/checkpoints/") >= 1
    # retention removed the dropped checkpoints' objects from the bucket
    kept = sorted(p for p in _bucket_files(s3_url, exp.id) if p.startswith("checkpoints/"))
    assert [Path(p).name for p in kept] == ["step-000000002.pkl", "step-000000003.pkl"], kept
    store.close()
