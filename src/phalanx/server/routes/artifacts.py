"""Artifacts and models: lists, downloads with their content type, and previews for the UI.

Downloads come from the artifact store only through :class:`ArtifactFiles`, which refuses any path
that could leave the experiment's folder. What a replica uploaded is served with ``nosniff`` and a
sandbox CSP, so an uploaded HTML or SVG file can never run script in the UI's origin.
"""

from __future__ import annotations

import contextlib
import json
import mimetypes
import re
import tempfile
import zipfile
from collections.abc import Iterator
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Query
from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel

from phalanx.errors import NotFound
from phalanx.server.deps import FilesDep, StoreDep, experiment_of
from phalanx.server.files import ArtifactFiles, safe_relpath
from phalanx.server.policy import policy
from phalanx.server.schemas import ArtifactOut, ModelOut

router = APIRouter(tags=["artifacts"])

PREVIEW_BYTES = 256 * 1024
INLINE_SAFE = (
    "image/png",
    "image/jpeg",
    "image/gif",
    "image/webp",
    "application/json",
    "text/plain",
    "text/csv",
)
# type "/" subtype [; name=value]...: RFC 9110 tokens, nothing that could end the header line
_TOKEN = r"[A-Za-z0-9!#$%&'*+.^_`|~-]+"
MEDIA_TYPE = re.compile(rf"{_TOKEN}/{_TOKEN}([ \t]*;[ \t]*{_TOKEN}=(?:{_TOKEN}|\"[^\"\\\x00-\x1f\x7f]*\"))*")
SAFETY_HEADERS = {"X-Content-Type-Options": "nosniff", "Content-Security-Policy": "sandbox"}


class PreviewOut(BaseModel):
    name: str
    kind: str
    content_type: str
    preview: str  # "json" | "text" | "image" | "files" | "none"
    text: str | None = None
    files: list[str] | None = None
    truncated: bool = False


@router.get("/experiments/{experiment_id}/artifacts", response_model=list[ArtifactOut])
@policy("experiment:viewer")
def list_artifacts(
    experiment_id: str,
    store: StoreDep,
    kind: Annotated[
        str | None,
        Query(
            max_length=16,
            description="only this kind: 'report' is the Logger's images, histograms, tables and plots "
            "(their metadata: report, title, series, step, rank)",
        ),
    ] = None,
) -> list[ArtifactOut]:
    e = experiment_of(store, experiment_id)
    return [ArtifactOut.of(a) for a in store.artifacts(e.id) if kind is None or a.kind == kind]


@router.get(
    "/experiments/{experiment_id}/artifacts/{name:path}",
    response_class=Response,
    responses={200: {"content": {"application/octet-stream": {}}, "description": "the artifact's bytes"}},
)
@policy("experiment:viewer")
def download_artifact(
    experiment_id: str,
    name: str,
    store: StoreDep,
    files: FilesDep,
    inline: Annotated[bool, Query(description="show in the browser instead of saving")] = False,
) -> Response:
    """The artifact's bytes with its content type; a folder artifact comes as a zip."""
    e = experiment_of(store, experiment_id)
    record = next((a for a in store.artifacts(e.id) if a.name == name), None)
    if record is None:
        raise NotFound(f"experiment {e.id} has no artifact named {name!r}")
    return _file_response(files, e.id, record.path, record.content_type, name, inline)


@router.get("/experiments/{experiment_id}/files", response_model=list[str])
@policy("experiment:viewer")
def list_files(experiment_id: str, store: StoreDep, files: FilesDep) -> list[str]:
    """Every file stored for the experiment (artifacts, models, its code bundle), as paths
    GET .../files/{path} serves: what ``Run.get_file_names()`` lists."""
    return files.files(experiment_of(store, experiment_id).id)


@router.get(
    "/experiments/{experiment_id}/files/{path:path}",
    response_class=Response,
    responses={200: {"content": {"application/octet-stream": {}}, "description": "the file's bytes"}},
)
@policy("experiment:viewer")
def get_file(experiment_id: str, path: str, store: StoreDep, files: FilesDep) -> Response:
    """A file of the experiment's folder by its path (what PUT .../files/{path} stored): how a pod on
    a cluster fetches the experiment's code bundle."""
    e = experiment_of(store, experiment_id)
    clean = safe_relpath(path)
    if files.is_dir(e.id, clean):
        raise NotFound(f"experiment {e.id} has no file {clean!r} (it is a folder)")
    files.size(e.id, clean)  # NotFound when absent, before the response starts
    return _file_response(files, e.id, clean, "application/octet-stream", clean, False)


@router.get("/experiments/{experiment_id}/previews/{name:path}", response_model=PreviewOut)
@policy("experiment:viewer")
def preview_artifact(experiment_id: str, name: str, store: StoreDep, files: FilesDep) -> PreviewOut:
    """What the UI shows of an artifact: JSON or text (first 256 KiB), an image, or a folder's files."""
    e = experiment_of(store, experiment_id)
    a = next((a for a in store.artifacts(e.id) if a.name == name), None)
    if a is None:
        raise NotFound(f"experiment {e.id} has no artifact named {name!r}")
    out: dict[str, Any] = {"name": a.name, "kind": a.kind, "content_type": a.content_type}
    if files.is_dir(e.id, a.path):
        return PreviewOut(**out, preview="files", files=files.walk(e.id, a.path)[:1000])
    try:
        files.size(e.id, a.path)
    except NotFound:
        raise NotFound(
            f"artifact {a.name!r} is listed but its file is not in the artifact store"
            " (still being uploaded, or lost)"
        ) from None
    ctype = a.content_type or ""
    if ctype.startswith("image/") and ctype in INLINE_SAFE:
        return PreviewOut(**out, preview="image")
    textual = a.kind in ("json", "text") or ctype.startswith("text/") or ctype == "application/json"
    if not textual:
        return PreviewOut(**out, preview="none")
    data = files.read(e.id, a.path, PREVIEW_BYTES + 1)
    truncated = len(data) > PREVIEW_BYTES
    text = data[:PREVIEW_BYTES].decode("utf-8", errors="replace")
    if ctype == "application/json" or a.kind == "json":
        if not truncated:
            with contextlib.suppress(ValueError):
                text = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        return PreviewOut(**out, preview="json", text=text, truncated=truncated)
    return PreviewOut(**out, preview="text", text=text, truncated=truncated)


@router.get("/experiments/{experiment_id}/models", response_model=list[ModelOut])
@policy("experiment:viewer")
def list_models(experiment_id: str, store: StoreDep) -> list[ModelOut]:
    e = experiment_of(store, experiment_id)
    return [ModelOut.of(m) for m in store.models(e.id)]


@router.get(
    "/experiments/{experiment_id}/models/{name:path}",
    response_class=Response,
    responses={200: {"content": {"application/octet-stream": {}}, "description": "the model file"}},
)
@policy("experiment:viewer")
def download_model(experiment_id: str, name: str, store: StoreDep, files: FilesDep) -> Response:
    """A saved model's file (``name`` or ``name.format`` when several formats share a name)."""
    e = experiment_of(store, experiment_id)
    models = store.models(e.id)
    record = next((m for m in models if m.name == name), None) or next(
        (m for m in models if f"{m.name}.{m.format}" == name), None
    )
    if record is None:
        raise NotFound(f"experiment {e.id} has no model named {name!r}")
    return _file_response(files, e.id, record.path, "application/octet-stream", record.path, False)


def _file_response(
    files: ArtifactFiles, experiment_id: str, path: str, content_type: str, name: str, inline: bool
) -> Response:
    ctype = content_type or mimetypes.guess_type(path)[0] or "application/octet-stream"
    if len(ctype) > 200 or not MEDIA_TYPE.fullmatch(ctype):
        # a content type that came through ingest is only a claim: one that is no media type (a line
        # break in it made the server drop the connection without an answer) is served as bytes
        ctype = "application/octet-stream"
    filename = path.rsplit("/", 1)[-1] or name
    if files.is_dir(experiment_id, path):
        # Built in a spooled temp file (memory up to 32 MiB, disk beyond), each member streamed in.
        spool = tempfile.SpooledTemporaryFile(max_size=32 * 1024 * 1024)  # noqa: SIM115 (closed below)
        with zipfile.ZipFile(spool, "w", zipfile.ZIP_DEFLATED) as z:
            for rel in files.walk(experiment_id, path):
                with z.open(rel, "w") as member:
                    for chunk in files.iter_bytes(experiment_id, f"{path}/{rel}"):
                        member.write(chunk)
        size = spool.tell()
        spool.seek(0)

        def zipped() -> Iterator[bytes]:
            with spool:
                while chunk := spool.read(1024 * 1024):
                    yield chunk

        return StreamingResponse(
            zipped(),
            media_type="application/zip",
            headers={**SAFETY_HEADERS, **_disposition(f"{filename}.zip", False), "Content-Length": str(size)},
        )
    size = files.size(experiment_id, path)
    show_inline = inline and ctype in INLINE_SAFE
    return StreamingResponse(
        files.iter_bytes(experiment_id, path),
        media_type=ctype,
        headers={**SAFETY_HEADERS, **_disposition(filename, show_inline), "Content-Length": str(size)},
    )


def _disposition(filename: str, inline: bool) -> dict[str, str]:
    # control characters (a line break in a file's name) would end the header line: replaced
    printable = "".join("_" if ord(c) < 32 or ord(c) == 127 else c for c in filename)
    ascii_name = printable.encode("ascii", "replace").decode().replace('"', "_").replace("?", "_")
    kind = "inline" if inline else "attachment"
    return {"Content-Disposition": f"{kind}; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(filename)}"}
