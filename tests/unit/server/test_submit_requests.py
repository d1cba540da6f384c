"""POST /api/v1/experiments refuses what it cannot run before anything is unpacked or started."""

from __future__ import annotations

from pathlib import Path

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
