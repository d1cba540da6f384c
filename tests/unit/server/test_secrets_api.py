"""Project secrets over HTTP: set and listed by name, never answered back, kept encrypted."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from phalanx.store import secrets
from phalanx.store.base import Store

VALUE = "s3cr3t-Zq9vKx-unmistakable"


def test_a_secret_is_set_listed_by_name_and_never_answered(
    client: TestClient, store: Store, phalanx_home: Path
) -> None:
    r = client.put("/api/v1/projects/vision/secrets/S3_SECRET_KEY", json={"value": VALUE})
    assert r.status_code == 204 and r.content == b""
    listed = client.get("/api/v1/projects/vision/secrets")
    assert [s["name"] for s in listed.json()] == ["S3_SECRET_KEY"]
    assert VALUE not in listed.text
    assert client.get("/api/v1/projects/nlp/secrets").json() == []
    # only the project's own experiments get it, in clear, through the supervisor
    assert secrets.environment(store, phalanx_home, "vision") == {"S3_SECRET_KEY": VALUE}
    assert secrets.environment(store, phalanx_home, "nlp") == {}
    # the database holds ciphertext only; the key lives beside it, readable by its owner alone
    for db in phalanx_home.glob("phalanx.db*"):
        assert VALUE.encode() not in db.read_bytes()
    assert (phalanx_home / "secrets.key").stat().st_mode & 0o077 == 0
    assert client.delete("/api/v1/projects/vision/secrets/S3_SECRET_KEY").status_code == 204
    assert client.delete("/api/v1/projects/vision/secrets/S3_SECRET_KEY").status_code == 404


def test_a_bad_name_or_value_is_400_and_stores_nothing(client: TestClient) -> None:
    for name, body, words in (
        ("lower_case", {"value": "x"}, "environment variable name"),
        ("PHALANX_TOKEN", {"value": "x"}, "not starting with PHALANX_"),
        ("GOOD", {"value": ""}, "1 byte to 64 KiB"),
    ):
        r = client.put(f"/api/v1/projects/vision/secrets/{name}", json=body)
        assert r.status_code == 400, r.text
        assert words in r.json()["message"]
    assert client.get("/api/v1/projects/vision/secrets").json() == []
