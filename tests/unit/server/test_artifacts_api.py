import io
import json
import zipfile
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from phalanx.domain import EventKind
from phalanx.store.base import Store
from phalanx.store.sql.store import SqlStore
from tests.unit.server import fill

PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c4890000000d49444154789c6360f8cf"
    "c0f01f0005000201e2d8d0b40000000049454e44ae426082"
)


def _artifact(
    store: SqlStore,
    exp: str,
    name: str,
    path: str,
    data: bytes,
    kind: str,
    ctype: str,
    replica: str = "worker-0",
) -> None:
    assert store.artifact_store is not None
    store.artifact_store.put_bytes(exp, path, data)
    store.write_events(
        [
            fill.event(
                exp,
                EventKind.ARTIFACT,
                {"name": name, "kind": kind, "path": path, "size": len(data), "content_type": ctype},
                replica,
            )
        ]
    )


@pytest.fixture
def exp_id(store: SqlStore) -> str:
    e = fill.experiment(store)
    _artifact(
        store, e.id, "temp 00", "artifacts/temp 00.json", b'{"worker_rank": 0}', "json", "application/json"
    )
    _artifact(store, e.id, "notes", "artifacts/notes.txt", b"hello\nworld\n", "text", "text/plain")
    _artifact(store, e.id, "curve", "artifacts/curve.png", PNG, "image", "image/png")
    _artifact(store, e.id, "page", "artifacts/page.html", b"<script>alert(1)</script>", "file", "text/html")
    assert store.artifact_store is not None
    store.artifact_store.put_bytes(e.id, "artifacts/ckpt/a.txt", b"A")
    store.artifact_store.put_bytes(e.id, "artifacts/ckpt/sub/b.txt", b"B")
    store.write_events(
        [
            fill.event(
                e.id,
                EventKind.ARTIFACT,
                {
                    "name": "ckpt",
                    "kind": "folder",
                    "path": "artifacts/ckpt",
                    "size": 2,
                    "content_type": "inode/directory",
                },
            )
        ]
    )
    return e.id


def test_list_names_each_artifact_with_its_replica(client: TestClient, exp_id: str) -> None:
    rows = client.get(f"/api/v1/experiments/{exp_id}/artifacts").json()
    assert {r["name"] for r in rows} == {"temp 00", "notes", "curve", "page", "ckpt"}
    assert next(r for r in rows if r["name"] == "temp 00")["replica"] == "worker-0"


def test_download_has_the_content_type_and_the_bytes(client: TestClient, exp_id: str) -> None:
    r = client.get(f"/api/v1/experiments/{exp_id}/artifacts/temp%2000")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("application/json")
    assert r.json() == {"worker_rank": 0}
    assert r.headers["content-disposition"].startswith("attachment")
    img = client.get(f"/api/v1/experiments/{exp_id}/artifacts/curve", params={"inline": "true"})
    assert img.headers["content-type"] == "image/png" and img.content == PNG
    assert img.headers["content-disposition"].startswith("inline")


def test_uploaded_html_is_never_rendered_inline(client: TestClient, exp_id: str) -> None:
    r = client.get(f"/api/v1/experiments/{exp_id}/artifacts/page", params={"inline": "true"})
    assert r.headers["content-disposition"].startswith("attachment")
    assert r.headers["x-content-type-options"] == "nosniff"
    assert r.headers["content-security-policy"] == "sandbox"


def test_a_folder_artifact_downloads_as_a_zip(client: TestClient, exp_id: str) -> None:
    r = client.get(f"/api/v1/experiments/{exp_id}/artifacts/ckpt")
    assert r.headers["content-type"] == "application/zip"
    with zipfile.ZipFile(io.BytesIO(r.content)) as z:
        assert sorted(z.namelist()) == ["a.txt", "sub/b.txt"]


def test_previews_for_json_text_image_and_folders(client: TestClient, exp_id: str) -> None:
    def preview(name: str) -> dict[str, object]:
        r = client.get(f"/api/v1/experiments/{exp_id}/previews/{name}")
        assert r.status_code == 200
        doc: dict[str, object] = r.json()
        return doc

    j = preview("temp 00")
    assert j["preview"] == "json" and json.loads(str(j["text"])) == {"worker_rank": 0}
    assert preview("notes")["text"] == "hello\nworld\n"
    assert preview("curve")["preview"] == "image"
    assert preview("ckpt")["files"] == ["a.txt", "sub/b.txt"]
    assert preview("page")["preview"] == "text"  # shown as text, never as a page


def test_unknown_artifact_is_404(client: TestClient, exp_id: str) -> None:
    assert client.get(f"/api/v1/experiments/{exp_id}/artifacts/nope").status_code == 404
    assert client.get(f"/api/v1/experiments/{exp_id}/previews/nope").status_code == 404


def test_models_list_and_download(client: TestClient, store: SqlStore) -> None:
    e = fill.experiment(store)
    assert store.artifact_store is not None
    store.artifact_store.put_bytes(e.id, "models/mlp.onnx", b"onnx-bytes")
    store.write_events(
        [
            fill.event(
                e.id,
                EventKind.MODEL,
                {
                    "name": "mlp",
                    "format": "onnx",
                    "path": "models/mlp.onnx",
                    "size": 10,
                    "metadata": {"opset": 18},
                },
            )
        ]
    )
    rows = client.get(f"/api/v1/experiments/{e.id}/models").json()
    assert rows[0]["name"] == "mlp" and rows[0]["metadata"] == {"opset": 18}
    r = client.get(f"/api/v1/experiments/{e.id}/models/mlp")
    assert r.content == b"onnx-bytes" and 'filename="mlp.onnx"' in r.headers["content-disposition"]


def test_a_record_pointing_outside_the_folder_is_refused(client: TestClient, store: Store) -> None:
    e = fill.experiment(store)
    # Written straight through the store (the ingest path would already refuse it).
    store.write_events(
        [
            fill.event(
                e.id,
                EventKind.ARTIFACT,
                {
                    "name": "evil",
                    "kind": "file",
                    "path": "../../etc/passwd",
                    "size": 1,
                    "content_type": "text/plain",
                },
            )
        ]
    )
    r = client.get(f"/api/v1/experiments/{e.id}/artifacts/evil")
    assert r.status_code == 400
    assert "root:" not in r.text


@pytest.mark.parametrize("kind", ["file", "folder", "json"])
def test_an_artifact_whose_file_has_not_arrived_is_404_saying_so(
    client: TestClient, store: Store, kind: str
) -> None:
    e = fill.experiment(store)
    data = {
        "name": "late",
        "kind": kind,
        "path": "artifacts/late",
        "size": 9,
        "content_type": "application/json",
    }
    store.write_events([fill.event(e.id, EventKind.ARTIFACT, data)])
    r = client.get(f"/api/v1/experiments/{e.id}/previews/late")
    assert r.status_code == 404
    assert "not in the artifact store" in r.json()["message"]


def test_a_link_in_the_experiment_folder_cannot_lead_outside_it(
    client: TestClient, store: SqlStore, exp_id: str, tmp_path: Path
) -> None:
    """Someone who can write in the artifact root (a shared file system) plants links to files of the
    server's user: the file routes neither read nor write through them."""
    secret = tmp_path / "outside" / "id_rsa"
    secret.parent.mkdir()
    secret.write_text("PRIVATE KEY")
    assert store.artifact_store is not None
    folder = Path(store.artifact_store.url(exp_id))
    (folder / "link").symlink_to(secret)
    (folder / "dir").symlink_to(secret.parent)
    (folder / "artifacts" / "ckpt" / "key").symlink_to(secret)
    base = f"/api/v1/experiments/{exp_id}"
    for path in ("link", "dir/id_rsa"):
        r = client.get(f"{base}/files/{path}")
        assert r.status_code == 404 and "PRIVATE" not in r.text
    put = client.put(f"{base}/files/dir/planted", content=b"x")
    assert put.status_code == 404
    assert not (secret.parent / "planted").exists()
    assert client.put(f"{base}/files/dir/id_rsa", content=b"gone").status_code == 404
    assert secret.read_text() == "PRIVATE KEY"
    zipped = client.get(f"{base}/artifacts/ckpt")
    assert zipped.status_code == 200
    names = zipfile.ZipFile(io.BytesIO(zipped.content)).namelist()
    assert sorted(names) == ["a.txt", "sub/b.txt"]
    preview = client.get(f"{base}/previews/ckpt").json()
    assert preview["files"] == ["a.txt", "sub/b.txt"]


@pytest.mark.parametrize(
    # ("x" * 128: the longest a record may now claim; a longer one is refused at ingest)
    "claimed",
    ["text/plain\r\nSet-Cookie: phalanx_session=x", "text/plain\r\n; a=b", "not a type", "x" * 128],
)
def test_a_content_type_that_is_no_media_type_is_served_as_bytes(
    client: TestClient, store: SqlStore, exp_id: str, claimed: str
) -> None:
    """The content type of an artifact is whatever its record claimed: one with a line break made the
    server drop the connection with no answer (h11 refuses the header); it is served as bytes."""
    _artifact(store, exp_id, "odd", "artifacts/odd.txt", b"hello", "file", claimed)
    for inline in ("false", "true"):
        r = client.get(f"/api/v1/experiments/{exp_id}/artifacts/odd?inline={inline}")
        assert r.status_code == 200 and r.content == b"hello"
        assert r.headers["content-type"] == "application/octet-stream"
        assert r.headers["content-disposition"].startswith("attachment")
        assert "set-cookie" not in r.headers


def test_a_real_media_type_with_parameters_is_kept(client: TestClient, store: SqlStore, exp_id: str) -> None:
    _artifact(store, exp_id, "csv", "artifacts/t.csv", b"a,b\n", "file", 'text/csv; charset="utf-8"')
    r = client.get(f"/api/v1/experiments/{exp_id}/artifacts/csv")
    assert r.headers["content-type"] == 'text/csv; charset="utf-8"'


def test_a_file_name_with_a_line_break_downloads(client: TestClient, store: SqlStore, exp_id: str) -> None:
    """Content-Disposition carries the file's name: a line break in it would end the header line."""
    _artifact(store, exp_id, "odd name", "artifacts/a\r\nSet-Cookie: x=1.txt", b"hi", "text", "text/plain")
    r = client.get(f"/api/v1/experiments/{exp_id}/artifacts/odd name")
    assert r.status_code == 200 and r.content == b"hi"
    disposition = r.headers["content-disposition"]
    assert "\r" not in disposition and "\n" not in disposition and "set-cookie" not in r.headers
    assert 'filename="a__Set-Cookie: x=1.txt"' in disposition
