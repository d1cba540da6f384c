"""Data over the API: an experiment's inputs (its lineage records), the dataset versions they name,
and the bytes of an input's files for the pods that fetch them.

Why the bytes go through the server: a Kubernetes pod's ``fetch-inputs`` init container runs in the
replica's own image with Python's standard library only (as ``fetch-code`` does), and with the
experiment's token only: it has neither s3fs nor cloud credentials, and needs neither. The server
reads the data where it is (a local or NFS path, ``s3://`` with its own credentials) and streams it
in 1 MiB pieces; only files the input's dataset version or datastore folder holds are served, each
through the same path rules as artifacts. Datastore URLs never hold credentials (the catalog refuses
them), so every answer here is safe to show.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, StreamingResponse

from phalanx.data.lineage import inputs_of
from phalanx.errors import NotFound
from phalanx.server.deps import StoreDep, experiment_of
from phalanx.server.policy import policy, principal_of

router = APIRouter(tags=["data"])
page_router = APIRouter(include_in_schema=False)


@page_router.get("/datasets/{name}/versions/{version}")
@policy("signed-in")  # the shell holds no data: the API it calls checks the caller
def dataset_version_page(name: str, version: str) -> HTMLResponse:
    from phalanx.server.routes.pages import _shell

    return _shell()


def _catalog_store(store: Any) -> Any:
    """The server's store as the catalog reads it (its SQL tables)."""
    return store


@router.get("/datasets")
@policy("signed-in")
def list_datasets(request: Request, store: StoreDep) -> list[dict[str, Any]]:
    """Every dataset version the caller may see (its projects' and the shared), oldest first per name."""
    from phalanx.store import catalog

    return [v.to_json() for v in catalog.list_datasets(_catalog_store(store)) if _visible(request, v)]


@router.get("/datasets/{name}/versions/{version}")
@policy("signed-in")
def get_dataset_version(request: Request, name: str, version: str, store: StoreDep) -> dict[str, Any]:
    """One dataset version with its manifest (every file's path, size and sha256); 404 for another
    project's, as for one that does not exist."""
    from phalanx.store import catalog

    found = catalog.get_dataset(_catalog_store(store), f"{name}@{version}")
    if not _visible(request, found):
        raise NotFound(f"no dataset {name!r} in your projects")
    return found.to_json(with_files=True)


def _visible(request: Request, record: Any) -> bool:
    """A dataset of one of the caller's projects, or shared (an admin sees every one)."""
    projects = principal_of(request).visible_projects()
    return projects is None or bool(record.shared) or record.project in projects


@router.get("/experiments/{experiment_id}/inputs")
@policy("experiment:viewer")
def list_inputs(experiment_id: str, store: StoreDep) -> list[dict[str, Any]]:
    """The data the experiment read: dataset versions (ref, digest) and datastore folders."""
    e = experiment_of(store, experiment_id)
    return [_public(r) for r in inputs_of(e.plan)]


def _public(record: dict[str, Any]) -> dict[str, Any]:
    """A lineage record without the paths of the machine that resolved it."""
    return {k: v for k, v in record.items() if k != "local_path"}


@router.get(
    "/experiments/{experiment_id}/inputs/{name}/files/{path:path}",
    responses={200: {"content": {"application/octet-stream": {}}, "description": "the file's bytes"}},
)
@policy("experiment:viewer")
def get_input_file(experiment_id: str, name: str, path: str, store: StoreDep) -> StreamingResponse:
    """One file of an input, as the experiment's dataset version or datastore folder holds it."""
    from phalanx.store.manifest import filesystem, join_url

    e = experiment_of(store, experiment_id)
    record = next((r for r in inputs_of(e.plan) if r.get("name") == name), None)
    if record is None:
        raise NotFound(f"experiment {e.id} has no input named {name!r}")
    if record.get("kind") == "dataset":
        from phalanx.store import catalog

        version = catalog.get_dataset(_catalog_store(store), str(record["ref"]))
        if path not in {f.path for f in version.files}:
            raise NotFound(f"dataset {version.ref} has no file {path!r}")
        url = join_url(version.url, path)
    else:
        url = join_url(str(record["url"]), path)
    fs, full = filesystem(url)
    if not fs.isfile(full):
        raise NotFound(f"input {name!r} has no file {path!r}")

    def chunks() -> Iterator[bytes]:
        with fs.open(full, "rb") as fh:
            while chunk := fh.read(1024 * 1024):
                yield chunk

    return StreamingResponse(
        chunks(),
        media_type="application/octet-stream",
        headers={"X-Content-Type-Options": "nosniff", "Content-Security-Policy": "sandbox"},
    )
