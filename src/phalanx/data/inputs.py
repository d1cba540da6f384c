"""Inputs: the data an experiment reads, given in the file's ``inputs:`` section or the estimator's
``inputs=[...]`` / ``script_params={'--data_dir': ds}``, resolved before anything starts. Their
parsing and naming (``InputSpec``, ``parse_inputs``) live in ``phalanx.spec.inputs``; this module
resolves and fetches them (it reads the catalog in the store and the files through fsspec).

Every replica finds input NAME at the same local path, in the environment variable
``PHALANX_INPUT_<NAME>`` (upper case, other characters as ``_``); ``{{ inputs.NAME }}`` in run.cmd
becomes that variable (expanded by the replica's shell), so the command is the same on every
engine. ``resolve`` turns each input into that path and a lineage record (the dataset version and
its digest, or the datastore's URL), which the plan keeps: ``phalanx get``, the API and ``phalanx
diff`` show it. A name that does not exist is a NotFound (exit 2) before anything starts.

Modes: ``download`` (the default) fetches the files once per machine into the content-addressed
cache (``phalanx.data.cache``); ``mount`` gives the data's own folder when it is a local or NFS path
(a dataset's files are checked against their hashes first). A ``mount`` of an object store falls back
to ``download``: no FUSE is used (containers and CI machines rarely allow it), and the record says so.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from phalanx.data import cache
from phalanx.data.credentials import Access
from phalanx.errors import NotFound, UsageError
from phalanx.spec.inputs import InputSpec
from phalanx.store import open_store
from phalanx.store.manifest import DataChanged, FileEntry, Manifest, build_manifest, filesystem, join_url

if TYPE_CHECKING:
    from phalanx.config import Settings


def resolve(
    inputs: Sequence[InputSpec],
    settings: Settings,
    *,
    dry: bool = False,
    orders: list[dict[str, Any]] | None = None,
    reader: str | None = None,
) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """The environment every replica gets and the lineage records, for ``inputs``; downloads happen
    here (not when ``dry``). NotFound / UsageError (exit 2) for a name that does not exist.

    ``orders`` (a cluster engine: Slurm nodes, Kubernetes pods): downloads are not made here but
    appended to it as fetch orders (``fetch_order``), which each node or pod carries out into its own
    cache before its replicas start; their variables are then the engine's to set.

    ``reader``: the project of a server's boxed run. It reads only its project's and shared data
    (another project's is answered as if it did not exist), and an object store with its project's
    credentials (``data.credentials``), never the server's own."""
    if not inputs:
        return {}, []
    # the supervisor imports this module before its replicas start, and opens the store (SQLAlchemy)
    # only once they run when the experiment has no inputs
    from phalanx.store import catalog  # why: its SQL imports SQLAlchemy (see above)

    store: Any = open_store(settings)
    env: dict[str, str] = {}
    records: list[dict[str, Any]] = []
    try:
        for spec in inputs:
            access = Access(store, settings, reader)
            try:
                if spec.dataset is not None:
                    record = _dataset(store, spec, settings, dry, orders, access)
                else:
                    name = str(spec.datastore)
                    ds = access.find(partial(catalog.get_datastore, store, name), f"datastore {name!r}")
                    access.profile = ds.profile
                    record = _datastore(ds.url, spec, settings, dry, orders, access)
            except NotFound as exc:  # which of the file's inputs names it
                raise NotFound(f"inputs: {spec.name}: {exc}") from None
            if "local_path" in record:
                env[spec.env] = record["local_path"]
            records.append(record)
    finally:
        store.close()
    return env, records


def fetch_order(spec: InputSpec, manifest: Any, key: str, what: str) -> dict[str, Any]:
    """What a node or pod needs to fetch one input by itself (JSON): its variable, its cache key and
    the files with their hashes (an unhashed listing of a datastore has ``""``). No credentials: the
    node reads the store with its own."""
    return {
        "name": spec.name,
        "env": spec.env,
        "key": key,
        "what": what,
        "url": manifest.url,
        "files": [[f.path, f.size, f.sha256] for f in manifest.files],
    }


def _dataset(
    store: Any,
    spec: InputSpec,
    settings: Settings,
    dry: bool,
    orders: list[dict[str, Any]] | None,
    access: Access,
) -> dict[str, Any]:
    from phalanx.store import catalog  # why: SQLAlchemy only for an experiment with inputs (resolve)

    ref = str(spec.dataset)
    # this machine's user may hear of the nearest name; a project's reader only of its own data, and
    # NAME@latest is the newest version it may read (a newer one of another project's is not there)
    readable = None if access.reader is None else (access.reader,)
    lookup = partial(catalog.get_dataset, store, ref, near=access.reader is None, projects=readable)
    version = access.find(lookup, f"dataset {ref!r}")
    record: dict[str, Any] = {
        "name": spec.name,
        "kind": "dataset",
        "dataset": version.name,
        "version": version.version,
        "ref": version.ref,
        "digest": version.digest,
        "url": version.url,
        "mode": spec.mode,
        "requested_mode": spec.mode,
        "env": spec.env,
    }
    what = f"input {spec.name!r} (dataset {version.ref})"
    local_source = "://" not in version.url
    if spec.mode == "mount" and local_source:
        if not dry:
            _check_in_place(version.manifest, what)
        record["local_path"] = version.url
        return record
    if spec.mode == "mount":
        record["mode"] = "download"
        record["note"] = "mount of an object store: downloaded instead (no FUSE)"
    key = version.digest
    if orders is not None:
        orders.append(fetch_order(spec, version.manifest, key, what))
        record["fetched"] = "on each node"
        return record
    record["local_path"] = (
        str(cache.cache_root(settings.home) / key)
        if dry
        else str(cache.fetch(settings.home, version.manifest, key, what, access.credentials(version.url)))
    )
    return record


def _datastore(
    base: str,
    spec: InputSpec,
    settings: Settings,
    dry: bool,
    orders: list[dict[str, Any]] | None,
    access: Access,
) -> dict[str, Any]:
    url = join_url(base, spec.path)
    record: dict[str, Any] = {
        "name": spec.name,
        "kind": "datastore",
        "datastore": spec.datastore,
        "path": spec.path,
        "url": url,
        "mode": spec.mode,
        "requested_mode": spec.mode,
        "env": spec.env,
    }
    if "://" not in url:  # a local or NFS folder: every replica on this machine reads it in place
        if not Path(url).exists():
            raise UsageError(f"input {spec.name!r}: {url} does not exist (datastore {spec.datastore!r})")
        if spec.mode == "download":
            record["mode"] = "mount"
            record["note"] = "a local or NFS folder is read in place"
        record["local_path"] = url
        return record
    if spec.mode == "mount":
        record["mode"] = "download"
        record["note"] = "mount of an object store: downloaded instead (no FUSE)"
    manifest, key = _listing(url, access.credentials(url))
    record["listing"] = key
    what = f"input {spec.name!r} (datastore {spec.datastore})"
    if orders is not None:
        orders.append(fetch_order(spec, manifest, key, what))
        record["fetched"] = "on each node"
        return record
    record["local_path"] = (
        str(cache.cache_root(settings.home) / key)
        if dry
        else str(cache.fetch(settings.home, manifest, key, what, access.credentials(url)))
    )
    return record


def _listing(url: str, credentials: Mapping[str, Any] | None = None) -> tuple[Any, str]:
    """A datastore folder's files as a manifest without hashes (nobody recorded them), keyed by the
    listing itself (paths, sizes, ETags or modification times): changed content, a new cache entry."""
    fs, root = filesystem(url, credentials)
    found: dict[str, Any] = fs.find(root, detail=True)
    if not found:
        raise UsageError(f"{url}: no files there")
    files = []
    h = hashlib.sha256(url.encode())
    for full, info in sorted(found.items()):
        rel = full[len(root.rstrip("/")) + 1 :]
        stamp = info.get("ETag") or info.get("LastModified") or info.get("mtime") or ""
        h.update(f"{rel}\0{info.get('size')}\0{stamp}\n".encode())
        files.append(FileEntry(rel, int(info.get("size") or 0), ""))
    return Manifest(url, tuple(files)), h.hexdigest()


def _check_in_place(manifest: Any, what: str) -> None:
    """Read a referenced dataset where it is and refuse it if any file changed."""
    current = {f.path: f for f in build_manifest(manifest.url).files}
    for entry in manifest.files:
        now = current.get(entry.path)
        if now is None:
            raise DataChanged(f"{what}: file {entry.path!r} is gone from {manifest.url}")
        if now.sha256 != entry.sha256:
            raise DataChanged(
                f"{what}: file {entry.path!r} changed since the version was recorded; refused. "
                "Record the new content as a new version with `phalanx data add NAME PATH`"
            )
