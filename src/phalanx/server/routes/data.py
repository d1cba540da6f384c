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
from pathlib import PurePosixPath
from typing import Any

from fastapi import APIRouter, HTTPException, Request, Response
from fastapi.responses import HTMLResponse, StreamingResponse
from pydantic import BaseModel, Field

from phalanx.data.lineage import inputs_of
from phalanx.errors import Conflict, NotFound, UsageError
from phalanx.server.audit import describe
from phalanx.server.deps import StoreDep, experiment_of, get_settings
from phalanx.server.policy import policy, principal_of, require_project
from phalanx.server.routes.pages import _shell
from phalanx.spec.inputs import parse_dataset_ref
from phalanx.store import catalog
from phalanx.store.accounts import Role
from phalanx.store.dataset_reads import readers, versions_text
from phalanx.store.manifest import filesystem, join_url
from phalanx.suggest import did_you_mean

router = APIRouter(tags=["data"])
page_router = APIRouter(include_in_schema=False)


@page_router.get("/datasets/{name}/versions/{version}")
@policy("signed-in")  # the shell holds no data: the API it calls checks the caller
def dataset_version_page(name: str, version: str) -> HTMLResponse:
    return _shell()


class DatastoreIn(BaseModel):
    name: str = Field(max_length=128)
    url: str = Field(
        max_length=4096, description="an absolute folder path on the server's machine, or s3://..."
    )
    project: str | None = Field(None, description="the project it belongs to (an editor of it adds it)")
    shared: bool = Field(False, description="every project may read it (a server admin's)")
    profile: str | None = Field(None, max_length=128, description="the AWS profile a run reads it with")


class DatasetIn(BaseModel):
    name: str = Field(max_length=128)
    source: str = Field(
        min_length=1,
        max_length=4096,
        description="DATASTORE:sub/dir of a datastore the project reads (an admin: any path)",
    )
    copy_to: str | None = Field(
        None, min_length=1, max_length=128, description="a datastore of the project to copy into"
    )
    reference: bool = Field(
        False, description="leave the bytes where they are (checked on every fetch) instead of copying them"
    )
    project: str | None = None
    shared: bool = False


def _catalog(request: Request, store: Any) -> catalog.SqlCatalog:
    """The server's catalog, copying versions into its home's ``kept_folder``."""
    return catalog.catalog_of(store, get_settings(request).store.home)


@router.get("/datastores")
@policy("signed-in")
def list_datastores(request: Request, store: StoreDep) -> list[dict[str, Any]]:
    """Every datastore the caller may see (its projects' and the shared), by name."""
    return [d.to_json() for d in _catalog(request, store).datastores() if _visible(request, d)]


@router.get("/datastores/{name}")
@policy("signed-in")
def get_datastore(request: Request, name: str, store: StoreDep) -> dict[str, Any]:
    return _visible_datastore(request, store, name).to_json()


@router.post("/datastores", status_code=201)
@policy("body")
def add_datastore(request: Request, body: DatastoreIn, store: StoreDep) -> dict[str, Any]:
    """Register a datastore of ``project``, or a shared one: a server admin's (the server reads it
    with its own access); a project's editors then record datasets from it and remove it."""
    _may_change(request, body.project, body.shared, f"datastore {body.name!r}")
    if not principal_of(request).superuser:
        # the server reads what it names (hashes a version, serves its files) as itself: a folder of
        # its machine, or a bucket with its own AWS credentials; so naming one is an admin's
        raise HTTPException(
            403,
            f"datastore {body.name!r}: registering a datastore on a server is a server admin's (the server"
            " reads it with its own access); ask one to add it with --project, then record datasets from it",
        )
    if "://" not in body.url and not PurePosixPath(body.url).is_absolute():
        raise UsageError(
            f"datastore {body.name!r}: {body.url!r} is a relative path; give an absolute path on the "
            "server's machine, or an s3:// URL"
        )
    record = _catalog(request, store).add_datastore(
        body.name, body.url, project=body.project, shared=body.shared, profile=body.profile
    )
    describe(request, "datastore.add", record.name, record.project, record.url)
    return record.to_json()


@router.delete("/datastores/{name}", status_code=204)
@policy("signed-in")
def remove_datastore(request: Request, name: str, store: StoreDep) -> Response:
    """Forget a datastore (nothing is deleted where it points)."""
    record = _visible_datastore(request, store, name)
    _may_change(request, record.project, record.shared, f"datastore {name!r}")
    _catalog(request, store).remove_datastore(name)
    describe(request, "datastore.remove", name, record.project, record.url)
    return Response(status_code=204)


@router.get("/datasets")
@policy("signed-in")
def list_datasets(
    request: Request, store: StoreDep, name: str | None = None, manifest: bool = False
) -> list[dict[str, Any]]:
    """Every dataset version the caller may see (its projects' and the shared), oldest first per
    name; ``name``: one dataset's; ``manifest``: with every file's path, size and sha256."""
    found = _catalog(request, store).datasets(name)
    return [v.to_json(with_files=manifest) for v in found if _visible(request, v)]


@router.get("/datasets/{name}/versions/{version}")
@policy("signed-in")
def get_dataset_version(request: Request, name: str, version: str, store: StoreDep) -> dict[str, Any]:
    """One dataset version (``latest``: the newest) with its manifest (every file's path, size and
    sha256); 404 for another project's, as for one that does not exist."""
    return _visible_dataset(request, store, f"{name}@{version}").to_json(with_files=True)


@router.get(
    "/datasets/{name}/versions/{version}/files/{path:path}",
    responses={200: {"content": {"application/octet-stream": {}}, "description": "the file's bytes"}},
)
@policy("signed-in")
def get_dataset_file(
    request: Request, name: str, version: str, path: str, store: StoreDep
) -> StreamingResponse:
    """One file of a dataset version the caller may see (`phalanx data get REF --dir DIR` on a
    server); only the files the version's manifest holds (the reader checks their sha256)."""
    found = _visible_dataset(request, store, f"{name}@{version}")
    if path not in {f.path for f in found.files}:
        raise NotFound(f"dataset {found.ref} has no file {path!r}")
    return _stream(join_url(found.url, path), f"dataset {found.ref}: file {path!r} is gone from {found.url}")


@router.post("/datasets", status_code=201)
@policy("body")
def add_dataset(request: Request, body: DatasetIn, store: StoreDep) -> dict[str, Any]:
    """Record a new version of ``name`` from a datastore's folder (``DATASTORE:sub/dir``) the
    project reads; a server admin may also name any path or URL the server reads. Answers the
    version (the latest one, ``new`` false, when the content is the same)."""
    what = f"dataset {body.name!r}"
    _may_change(request, body.project, body.shared, what)
    cat = _catalog(request, store)
    if not principal_of(request).superuser:
        found = catalog.source_datastore(body.source)
        if found is None:
            raise UsageError(
                f"{what}: {body.source!r} is not a datastore's folder; record a version from one of "
                "your project's datastores, DATASTORE:sub/dir (a path or URL of the server's is an admin's)"
            )
        source = _visible_datastore(request, store, found[0])
        if not catalog.readable_by(source, body.project or ""):
            raise NotFound(f"no datastore {found[0]!r} that project {body.project} reads")
        if (
            body.copy_to is not None
            and _visible_datastore(request, store, body.copy_to).project != body.project
        ):
            raise NotFound(f"no datastore {body.copy_to!r} of project {body.project} to copy into")
    try:
        version, new = cat.add_dataset(
            body.name,
            body.source,
            copy_to=body.copy_to,
            project=body.project,
            shared=body.shared,
            reference=body.reference,
        )
    except Conflict as exc:
        raise _name_taken(request, store, body.name, exc) from None
    describe(request, "dataset.add", version.ref, version.project, "new" if new else "unchanged")
    return {**version.to_json(with_files=True), "new": new}


@router.delete("/datasets/{name}")
@policy("signed-in")
def remove_dataset(
    request: Request, name: str, store: StoreDep, version: str | None = None
) -> list[dict[str, Any]]:
    """Forget one version (``version``: a number or ``latest``) or, without it, every version of
    the dataset; answers what was forgotten. Bytes the server copied into its own folder go with
    the last version naming them; a source or a datastore's copy stays where it is."""
    ref = name if version is None else f"{name}@{version}"
    cat = _catalog(request, store)
    target = _visible_dataset(request, store, ref)
    _may_change(request, target.project, target.shared, f"dataset {name!r}")
    gone = cat.remove_dataset(ref if version is None else target.ref)  # latest: the newest it sees
    describe(request, "dataset.remove", ref, target.project, ", ".join(v.ref for v in gone))
    return [v.to_json(with_files=True) for v in gone]


@router.get("/datasets/{name}/readers")
@policy("signed-in")
def dataset_readers(request: Request, name: str, store: StoreDep, versions: str = "") -> dict[str, int]:
    """How many experiments of the caller's projects read one of ``versions`` (``1,3``; none: every
    version) of a dataset it may see: what `phalanx data rm` says before it forgets them."""
    _visible_dataset(request, store, name)
    try:
        wanted = [int(v) for v in versions.split(",") if v.strip()]
    except ValueError:
        raise UsageError(f"versions {versions!r}: give version numbers, e.g. 1,3") from None
    if not wanted:
        wanted = [v.version for v in _catalog(request, store).datasets(name) if _visible(request, v)]
    count = readers(store, name, wanted, principal_of(request).visible_projects())
    return {"experiments": count}


def _visible_datastore(request: Request, store: Any, name: str) -> catalog.DatastoreRecord:
    """The datastore, if the caller may see it; else NotFound naming nothing of other projects'
    (the catalog's own message lists every datastore), only the nearest of those it may see."""
    cat = _catalog(request, store)
    try:
        record = cat.datastore(name)
    except NotFound:
        if principal_of(request).superuser:
            raise
        record = None
    if record is None or not _visible(request, record):
        seen = {d.name for d in cat.datastores() if _visible(request, d)}
        raise NotFound(f"no datastore {name!r} in your projects{did_you_mean(name, seen)}")
    return record


def _name_taken(request: Request, store: Any, name: str, conflict: Conflict) -> Conflict:
    """``conflict`` (the name's versions are another project's, which it names) for a caller who may
    read that project; for anyone else the same refusal naming no project. Names are one namespace
    on a server, so that the name is taken cannot be hidden; whose it is can."""
    projects = principal_of(request).visible_projects()
    try:
        owner = catalog.get_dataset(store, name).project
    except NotFound:  # removed meanwhile
        owner = None
    if projects is None or (owner is not None and owner in projects):
        return conflict
    return Conflict(
        f"dataset {name!r}: the name is taken by a project you are not a member of;"
        " record it under another name"
    )


def _visible_dataset(request: Request, store: Any, ref: str) -> catalog.DatasetVersion:
    """The version, if the caller may see it (``NAME@latest``: the newest of those it may see);
    else NotFound saying nothing of another project's versions, not even that a newer one exists."""
    projects = principal_of(request).visible_projects()
    try:
        return catalog.get_dataset(store, ref, near=True, projects=projects)
    except NotFound:
        if projects is None:
            raise
        raise _missing_dataset(request, store, ref) from None


def _missing_dataset(request: Request, store: Any, ref: str) -> NotFound:
    """Why ``ref`` names nothing the caller may see, from what it may see only: the versions of
    one of its datasets, else the nearest name among its projects' and the shared datasets."""
    name, version = parse_dataset_ref(ref)
    seen = [v for v in _catalog(request, store).datasets() if _visible(request, v)]
    versions = [v.version for v in seen if v.name == name]
    # only those it may read: a gap or a newer one of another's is not named. NAME@latest is missing
    # only when it may read no version: then the name is answered as one that does not exist
    if versions and version is not None:
        span = versions_text(versions)
        return NotFound(f"dataset {name!r} has no version {version} in your projects (versions: {span})")
    return NotFound(f"no dataset {name!r} in your projects{did_you_mean(name, {v.name for v in seen})}")


def _may_change(request: Request, project: str | None, shared: bool, what: str) -> None:
    """An editor of ``project`` changes its data; shared data, or a project's none, is a server admin's."""
    who = principal_of(request)
    if project is None or shared:
        if not who.superuser:
            raise HTTPException(
                403,
                f"{what}: data shared with every project, or of no project, is a server admin's; "
                "give the project it belongs to (--project P)",
            )
        return
    require_project(request, project, Role.editor)


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
    e = experiment_of(store, experiment_id)
    record = next((r for r in inputs_of(e.plan) if r.get("name") == name), None)
    if record is None:
        raise NotFound(f"experiment {e.id} has no input named {name!r}")
    if record.get("kind") == "dataset":
        version = catalog.get_dataset(store, str(record["ref"]))
        if path not in {f.path for f in version.files}:
            raise NotFound(f"dataset {version.ref} has no file {path!r}")
        url = join_url(version.url, path)
    else:
        url = join_url(str(record["url"]), path)
    return _stream(url, f"input {name!r} has no file {path!r}")


def _stream(url: str, missing: str) -> StreamingResponse:
    """The file at ``url`` in 1 MiB pieces, never shown as a page."""
    fs, full = filesystem(url)
    if not fs.isfile(full):
        raise NotFound(missing)

    def chunks() -> Iterator[bytes]:
        with fs.open(full, "rb") as fh:
            while chunk := fh.read(1024 * 1024):
                yield chunk

    return StreamingResponse(
        chunks(),
        media_type="application/octet-stream",
        headers={"X-Content-Type-Options": "nosniff", "Content-Security-Policy": "sandbox"},
    )
