"""POST /api/v1/experiments refuses what it cannot run before anything is unpacked or started."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from phalanx.server.app import create_app
from phalanx.server.settings import ServerSettings
from phalanx.store.base import Store

GOOD = "version: 1\nkind: experiment\nrun:\n  cmd: python -c pass\n"


def post(client: TestClient, bundle: bytes, text: str = GOOD, **headers: str) -> tuple[int, dict[str, str]]:
    r = client.post(
        "/api/v1/experiments",
        data={"file_name": "exp.yml", "file_text": text, "params": "{}"},
        files={"bundle": ("code.tar.gz", bundle, "application/gzip")},
        headers=headers,
    )
    return r.status_code, r.json()


def test_a_bundle_over_the_servers_cap_is_413(settings: ServerSettings, store: Store) -> None:
    small = settings.model_copy(update={"max_bundle_bytes": 10_000, "max_request_bytes": 10_000})
    with TestClient(create_app(small, store)) as client:
        status, body = post(client, b"\0" * 50_000)
    assert status == 413 and body["error"] == "payload_too_large"
    assert store.list_experiments().total == 0


def test_malformed_requests_are_400_and_start_nothing(
    settings: ServerSettings, store: Store, phalanx_home: Path
) -> None:
    with TestClient(create_app(settings, store)) as client:
        status, body = post(client, b"not a tar.gz")
        assert status == 400 and "not a readable .tar.gz" in body["message"]
        status, body = post(client, b"", **{"Idempotency-Key": "has spaces in it"})
        assert status == 400 and "Idempotency-Key" in body["message"]
        r = client.post(
            "/api/v1/experiments",
            data={"file_name": "../exp.yml", "file_text": GOOD},
            files={"bundle": ("code.tar.gz", b"", "application/gzip")},
        )
        assert r.status_code == 400 and "relative to its folder" in r.json()["message"]
    assert store.list_experiments().total == 0
    work = phalanx_home / "server" / "work"
    assert not work.exists() or not any(work.iterdir())  # the unpacked folder was removed again


def test_an_unknown_target_is_400_naming_the_registered_ones_and_keeps_nothing(
    client: TestClient, store: Store, phalanx_home: Path
) -> None:
    from phalanx.bundles import pack
    from phalanx.clusters import Cluster, add_cluster

    secret_conf = str(phalanx_home / "private" / "slurm.conf")
    add_cluster(Cluster(name="gpu-slurm", kind="slurm", slurm_conf=secret_conf), phalanx_home)
    code = phalanx_home / "code"
    code.mkdir()
    (code / "train.py").write_text("pass\n")
    r = client.post(
        "/api/v1/experiments",
        data={"file_name": "exp.yml", "file_text": GOOD, "target": "gpu-slrum"},
        files={"bundle": ("code.tar.gz", pack(code), "application/gzip")},
    )
    assert r.status_code == 400, r.text
    message = r.json()["message"]
    assert "target 'gpu-slrum'" in message and "local, gpu-slurm" in message
    r = client.post("/api/v1/experiments", json={"from": "0123456789ab", "target": "gpu-slrum"})
    assert r.status_code == 400 and "local, gpu-slurm" in r.json()["message"]
    assert store.list_experiments().total == 0
    for kept in ("bundles", "work"):  # no bundle kept, no folder unpacked
        folder = phalanx_home / "server" / kept
        assert not folder.exists() or not any(folder.iterdir())
    # the targets a submit may name: this machine and the clusters, without their settings
    r = client.get("/api/v1/targets")
    assert r.status_code == 200
    assert r.json() == [{"name": "local", "kind": "local"}, {"name": "gpu-slurm", "kind": "slurm"}]
    assert secret_conf not in r.text


def test_a_clone_with_latest_data_asks_the_rerun_rule_for_the_latest_versions(
    client: TestClient, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`phalanx rerun ID --server URL --latest-data`: the flag reaches the rerun rule (which moves
    each dataset input to NAME@latest: tests/unit/data, tests/integration/s3); nothing starts here."""
    from phalanx.errors import UsageError
    from phalanx.server import submitting
    from tests.unit.server import fill

    asked: list[bool] = []

    def refusing(*args: object, latest_data: bool = False, **kwargs: object) -> None:
        asked.append(latest_data)
        raise UsageError("stopped by the test")

    monkeypatch.setattr(submitting, "rerun_source", refusing)
    origin = fill.experiment(store).id
    for body, want in (({"from": origin}, False), ({"from": origin, "latest_data": True}, True)):
        r = client.post("/api/v1/experiments", json=body)
        assert r.status_code == 400 and "stopped by the test" in r.json()["message"], r.text
        assert asked.pop() is want
