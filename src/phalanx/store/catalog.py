"""The data catalog in the store: datastores (named places holding data) and the immutable versions
of datasets (tables ``datastores`` and ``dataset_versions``, migration 0008_data_catalog_i26).
It lives in the store package because it reads and writes those tables itself.

A datastore keeps only a URL: a local or NFS folder (kept as an absolute path) or an fsspec URL
(``s3://bucket/prefix``). Credentials never enter the catalog: whoever reads the data uses the AWS
variables or profile of its own machine.

A dataset version is its manifest (every file's relative path, size and sha256) plus where the bytes
are. ``phalanx data add NAME PATH`` copies a folder's bytes, checked, into the catalog's own folder
(``<home>/data/datasets/<name>/<digest>/``, ``kept_folder``) or, with ``--copy-to STORE``, into
``<store>/datasets/<name>/<digest>/``, so a version stays fetchable whatever later happens to its
source. With ``--reference``, or from an object store without ``--copy-to``, they stay where they
are (the manifest is then what a fetch checks them against: a changed file is refused, never
used). Adding the same content again returns the latest version; any change makes a new one.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from sqlalchemy import delete, func, insert, select

from phalanx.errors import Conflict, NotFound, UsageError
from phalanx.extras import require
from phalanx.spec.inputs import CATALOG_NAME, check_catalog_name, parse_dataset_ref
from phalanx.store.accounts import check_project
from phalanx.store.dataset_reads import readers, versions_text
from phalanx.store.manifest import FileEntry, Manifest, build_manifest, copy_tree, fetch_tree, join_url
from phalanx.store.sql.engine import writer
from phalanx.store.sql.models import DatasetVersionRow, DatastoreRow
from phalanx.suggest import did_you_mean
from phalanx.tracking.labels import label_problem

if TYPE_CHECKING:
    from phalanx.store.base import LocalStore


@dataclass(frozen=True)
class DatastoreRecord:
    name: str
    url: str
    created_at: float
    project: str | None = None  # the project that owns it (None: nobody's, only an admin's runs read it)
    shared: bool = False  # an admin shared it with every project
    profile: str | None = None  # the AWS profile a server's run reads it with (else its project's secrets)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "url": self.url,
            "created_at": self.created_at,
            "project": self.project,
            "shared": self.shared,
            "profile": self.profile,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> DatastoreRecord:
        """A record from ``to_json``'s document (a server's answer)."""
        return cls(
            str(doc["name"]),
            str(doc["url"]),
            float(doc["created_at"]),
            doc.get("project"),
            bool(doc.get("shared")),
            doc.get("profile"),
        )


@dataclass(frozen=True)
class DatasetVersion:
    name: str
    version: int
    digest: str
    url: str
    copied: bool
    files: tuple[FileEntry, ...]
    size: int
    created_at: float
    project: str | None = None
    shared: bool = False

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.version}"

    @property
    def manifest(self) -> Manifest:
        return Manifest(self.url, self.files)

    def to_json(self, with_files: bool = False) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "name": self.name,
            "version": self.version,
            "ref": self.ref,
            "digest": self.digest,
            "url": self.url,
            "bytes": "copied" if self.copied else "referenced",
            "size": self.size,
            "files": len(self.files),
            "created_at": self.created_at,
            "project": self.project,
            "shared": self.shared,
        }
        if with_files:
            doc["manifest"] = [f.to_json() for f in self.files]
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> DatasetVersion:
        """A version from ``to_json(with_files=True)``'s document (a server's answer)."""
        return cls(
            name=str(doc["name"]),
            version=int(doc["version"]),
            digest=str(doc["digest"]),
            url=str(doc["url"]),
            copied=doc["bytes"] == "copied",
            files=tuple(FileEntry.from_json(f) for f in doc["manifest"]),
            size=int(doc["size"]),
            created_at=float(doc["created_at"]),
            project=doc.get("project"),
            shared=bool(doc.get("shared")),
        )


def readable_by(record: DatastoreRecord | DatasetVersion, project: str) -> bool:
    """Whether a server's (boxed) experiment of ``project`` may read it: its own project's, or shared."""
    return record.shared or record.project == project


def check_owner(store: LocalStore, project: str | None, shared: bool, what: str) -> None:
    """``--project`` names a project (a label; on a team server one it knows: ``check_project``),
    and the data is either a project's or shared."""
    if project is not None:
        problem = label_problem(project, "project")
        if problem:
            raise UsageError(f"{what}: {problem}")
        check_project(store, project)


def normalise_url(url: str, what: str) -> str:
    """A local path as an absolute folder path that exists; a URL as given (its package checked)."""
    if "://" in url and "@" in url.split("://", 1)[1].split("/", 1)[0]:
        raise UsageError(
            f"{what} the URL holds credentials (user@ or key@); give them through the AWS variables or "
            "a profile, never in a URL (it would be stored and shown)"
        )
    if "://" in url and not url.startswith("file://"):
        protocol = url.split("://", 1)[0].lower()
        if protocol in ("s3", "s3a"):
            require("s3fs", "s3", f"{what} {url!r}")
        return url.rstrip("/")
    path = Path(url.removeprefix("file://")).expanduser().resolve()
    if not path.exists():
        raise UsageError(f"{what} {url!r}: no such file or folder; give an existing path or an s3:// URL")
    return str(path)


# ---- datastores ---------------------------------------------------------------------------------


def add_datastore(
    store: LocalStore,
    name: str,
    url: str,
    project: str | None = None,
    shared: bool = False,
    profile: str | None = None,
) -> DatastoreRecord:
    """``project``: who owns it; ``shared``: every project may read it; ``profile``: the AWS profile
    (of the server's machine) a server's run reads it with, else its project's secrets."""
    check_catalog_name(name, "datastore")
    check_owner(store, project, shared, f"datastore {name!r}")
    url = normalise_url(url, f"datastore {name!r}:")
    with writer(store.engine).begin() as conn:
        if conn.execute(select(_ds().c.name).where(_ds().c.name == name)).first() is not None:
            raise Conflict(f"datastore {name!r} exists; remove it first with `phalanx datastore rm {name}`")
        conn.execute(
            insert(_ds()).values(
                name=name,
                url=url,
                created_at=time.time(),
                project=project,
                shared=int(shared),
                profile=profile,
            )
        )
    return get_datastore(store, name)


def _datastore(r: Any) -> DatastoreRecord:
    return DatastoreRecord(
        r["name"], r["url"], r["created_at"], r["project"], bool(r["shared"]), r["profile"]
    )


def list_datastores(store: LocalStore) -> list[DatastoreRecord]:
    with store.engine.connect() as conn:
        rows = conn.execute(select(_ds()).order_by(_ds().c.name)).mappings().all()
    return [_datastore(r) for r in rows]


def get_datastore(store: LocalStore, name: str) -> DatastoreRecord:
    check_catalog_name(name, "datastore")  # what no datastore can be named is said as such
    with store.engine.connect() as conn:
        row = conn.execute(select(_ds()).where(_ds().c.name == name)).mappings().first()
    if row is None:
        names = [d.name for d in list_datastores(store)]
        raise NotFound(
            f"no datastore {name!r}{did_you_mean(name, names)} (datastores: {', '.join(names) or 'none'});"
            f" add it with `phalanx datastore add {name} URL`"
        )
    return _datastore(row)


def remove_datastore(store: LocalStore, name: str) -> None:
    get_datastore(store, name)
    with writer(store.engine).begin() as conn:
        conn.execute(delete(_ds()).where(_ds().c.name == name))


# ---- datasets -----------------------------------------------------------------------------------


def kept_folder(home: Path) -> Path:
    """The catalog's own datastore: where ``phalanx data add`` copies a version's bytes when it
    names no datastore (``<home>/data``; the versions under ``datasets/<name>/<digest>/``)."""
    return home / "data"


def add_dataset(
    store: LocalStore,
    name: str,
    source: str,
    copy_to: str | None = None,
    project: str | None = None,
    shared: bool = False,
    keep_in: Path | None = None,
) -> tuple[DatasetVersion, bool]:
    """Record a version of ``name`` from ``source`` (a path, an fsspec URL or ``store:sub/dir`` of a
    datastore); returns it and whether it is new (False: the latest version has the same content).
    The bytes are copied into the datastore ``copy_to``, else, from a folder of this machine, into
    the folder ``keep_in`` (the catalog's own, ``kept_folder``); otherwise they stay where they are
    (referenced: an object store's prefix is read where it is by every machine, a copy in one
    machine's home would not be). ``project`` owns it (every version of a name is the same
    project's); ``shared``: every project may read it."""
    check_catalog_name(name, "dataset")
    if not source.strip():
        raise UsageError(f"dataset {name!r}: no source; give a folder, an fsspec URL or DATASTORE:sub/dir")
    check_owner(store, project, shared, f"dataset {name!r}")
    latest = _latest(store, name)
    if latest is not None and latest.project is not None and latest.project != project:
        owner = f"project {latest.project}" if latest.project else "no project"
        raise Conflict(
            f"dataset {name!r} belongs to {owner}: record its new version with the same --project,"
            " or under another name"
        )
    url = resolve_source(store, source)
    manifest = build_manifest(url)
    if not manifest.files:
        raise UsageError(f"dataset {name!r}: {source!r} holds no files")
    into = get_datastore(store, copy_to).url if copy_to is not None else None
    keep = keep_in is not None and into is None and _on_this_machine(url)
    if latest is not None and latest.digest == manifest.digest and (not (into or keep) or latest.copied):
        return latest, False
    copied = False
    if into:
        target = f"{into}/datasets/{name}/{manifest.digest}"
        copy_tree(manifest, target)
        url, copied = target, True
    elif keep and keep_in is not None:
        url, copied = str(_keep(manifest, keep_in / "datasets" / name / manifest.digest)), True
    with writer(store.engine).begin() as conn:
        version = (
            int(conn.execute(select(func.max(_dv().c.version)).where(_dv().c.name == name)).scalar() or 0) + 1
        )
        conn.execute(
            insert(_dv()).values(
                name=name,
                version=version,
                digest=manifest.digest,
                url=url,
                copied=int(copied),
                files=[f.to_json() for f in manifest.files],
                size=manifest.size,
                file_count=len(manifest.files),
                created_at=time.time(),
                project=project,
                shared=int(shared),
            )
        )
    return get_dataset(store, f"{name}@{version}"), True


def _keep(manifest: Manifest, target: Path) -> Path:
    """The version's bytes copied, checked, into ``target`` of the catalog's own folder: whole or
    not at all (copied beside it, then renamed); a folder already there holds the same digest."""
    target = target.resolve()
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    partial.chmod(0o755)  # as a folder the user made: a run's box (its own account) mounts it
    try:
        copy_tree(manifest, str(partial))
        partial.rename(target)
    except OSError as exc:
        shutil.rmtree(partial, ignore_errors=True)
        if not target.is_dir():  # another add of the same content renamed first: theirs is the same
            raise UsageError(f"{manifest.url}: could not copy it into {target.parent}: {exc}") from exc
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return target


def _on_this_machine(url: str) -> bool:
    """A folder of this machine's filesystems (a path, ``file://``), not an object store's prefix."""
    return "://" not in url or url.startswith("file://")


def check_keeping(copy_to: str | None, reference: bool) -> None:
    """``--copy-to`` and ``--reference`` ask for opposite things: refused together."""
    if copy_to is not None and reference:
        raise UsageError(
            f"--copy-to {copy_to} copies the bytes and --reference leaves them where they are: give one"
        )


def source_datastore(source: str) -> tuple[str, str] | None:
    """``STORE:sub/dir`` as (datastore, sub/dir); None for a path or URL."""
    head, sep, rest = source.partition(":")
    if sep and not rest.startswith("//") and CATALOG_NAME.match(head) and len(head) > 1:
        return head, rest
    return None


def resolve_source(store: LocalStore, source: str) -> str:
    """A dataset's source as a URL or absolute path: ``STORE:sub/dir`` names a datastore's folder."""
    found = source_datastore(source)
    if found is not None:
        return join_url(get_datastore(store, found[0]).url, found[1])
    return normalise_url(source, "dataset source:")


def get_dataset(
    store: LocalStore, ref: str, *, near: bool = False, projects: Sequence[str] | None = None
) -> DatasetVersion:
    """The version ``ref`` names; NotFound when there is none. ``near``: a missing name's answer
    names the nearest dataset of all projects, so only for a caller who may see them all (this
    machine's user, a server admin); a server answers others from what they may see.

    ``projects``: a server's caller who reads only those projects' and the shared versions (None:
    every version). ``NAME`` or ``NAME@latest`` is then the newest of those, and a version not
    among them is answered as one that does not exist, naming nothing (the caller words it)."""
    name, version = parse_dataset_ref(ref)
    query = select(_dv()).where(_dv().c.name == name)
    if projects is not None:
        query = query.where((_dv().c.shared == 1) | _dv().c.project.in_(list(projects)))
    query = (
        query.where(_dv().c.version == version)
        if version is not None
        else query.order_by(_dv().c.version.desc())
    )
    with store.engine.connect() as conn:
        row = conn.execute(query.limit(1)).mappings().first()
    if row is None and projects is not None:
        raise NotFound(f"no dataset {ref!r}")
    if row is None:
        versions = [v.version for v in list_datasets(store, name)]
        if versions:
            raise NotFound(f"dataset {name!r} has no version {version} (versions: {versions_text(versions)})")
        raise no_dataset(name, dataset_names(store) if near else ())
    return _version(row)


def dataset_names(store: LocalStore) -> list[str]:
    """Every dataset's name, of every project (no manifest read)."""
    with store.engine.connect() as conn:
        return list(conn.execute(select(_dv().c.name).distinct()).scalars())


def no_dataset(name: str, names: Iterable[str]) -> NotFound:
    """Why ``name`` names no dataset: the nearest of ``names`` (those the caller may see; on a
    server, its projects' and the shared) when one is near, else how to record one."""
    hint = did_you_mean(name, names)
    if hint:
        return NotFound(f"no dataset {name!r}{hint}")
    return NotFound(f"no dataset {name!r}; record one with `phalanx data add {name} PATH`")


def list_datasets(store: LocalStore, name: str | None = None) -> list[DatasetVersion]:
    query = select(_dv()).order_by(_dv().c.name, _dv().c.version)
    if name is not None:
        query = query.where(_dv().c.name == name)
    with store.engine.connect() as conn:
        return [_version(r) for r in conn.execute(query).mappings().all()]


def remove_dataset(store: LocalStore, ref: str, kept: Path | None = None) -> list[DatasetVersion]:
    """Forget ``NAME@VERSION`` (``NAME@latest``: the newest), or with a bare ``NAME`` every version
    of it; returns what was forgotten. The bytes of a forgotten version that the catalog keeps
    itself (under ``kept``, its ``kept_folder``) go with the last version naming them; others stay
    where they are (a source folder, a datastore's copy)."""
    name, _ = parse_dataset_ref(ref)
    gone = [get_dataset(store, ref)] if "@" in ref else list_datasets(store, name)
    if not gone:
        get_dataset(store, name)  # NotFound, saying how to record one
    with writer(store.engine).begin() as conn:
        for v in gone:
            conn.execute(delete(_dv()).where(_dv().c.name == v.name, _dv().c.version == v.version))
    if kept is not None:
        named = {v.url for v in list_datasets(store, name)}
        for url in {v.url for v in gone if v.copied} - named:
            if Path(url).resolve().is_relative_to(kept.resolve()):
                shutil.rmtree(url, ignore_errors=True)
    return gone


def _latest(store: LocalStore, name: str) -> DatasetVersion | None:
    try:
        return get_dataset(store, f"{name}@latest")
    except NotFound:
        return None


def _version(row: Any) -> DatasetVersion:
    return DatasetVersion(
        name=row["name"],
        version=row["version"],
        digest=row["digest"],
        url=row["url"],
        copied=bool(row["copied"]),
        files=tuple(FileEntry.from_json(f) for f in row["files"]),
        size=row["size"],
        created_at=row["created_at"],
        project=row["project"],
        shared=bool(row["shared"]),
    )


def _ds() -> Any:
    return DatastoreRow


def _dv() -> Any:
    return DatasetVersionRow


# ---- the catalog as one door ----------------------------------------------------------------------


class Catalog(Protocol):
    """The data catalog as the CLI and ``Datastore.get``/``Dataset.get`` use it, on either door:
    this machine's store (``SqlCatalog``) or a server's API (``phalanx.data.remote.RemoteCatalog``,
    which applies the server's project rules). Errors are Phalanx errors on both."""

    def add_datastore(
        self, name: str, url: str, *, project: str | None, shared: bool, profile: str | None
    ) -> DatastoreRecord: ...

    def datastores(self) -> list[DatastoreRecord]: ...

    def datastore(self, name: str) -> DatastoreRecord: ...

    def remove_datastore(self, name: str) -> None: ...

    def add_dataset(
        self,
        name: str,
        source: str,
        *,
        copy_to: str | None,
        project: str | None,
        shared: bool,
        reference: bool = False,
    ) -> tuple[DatasetVersion, bool]:
        """A new version of ``name`` (or the latest, unchanged). Its bytes are copied into the
        datastore ``copy_to``, else into the catalog's own folder; ``reference``: they stay in
        ``source`` (checked on every fetch). Both at once is a UsageError."""
        ...

    def datasets(self, name: str | None = None) -> list[DatasetVersion]: ...

    def dataset(self, ref: str) -> DatasetVersion: ...

    def remove_dataset(self, ref: str) -> list[DatasetVersion]: ...

    def readers(self, name: str, versions: Sequence[int]) -> int | None:
        """How many experiments read one of these versions of ``name`` (their lineage records); None
        when the catalog cannot tell (a server older than this question)."""
        ...

    def fetch(self, version: DatasetVersion, directory: Path) -> None:
        """Copy ``version``'s files into ``directory`` (this machine's), each checked against its
        sha256 (DataChanged, exit 2, for one that changed), all or nothing (``fetch_tree``)."""
        ...

    def close(self) -> None: ...


def catalog_of(store: LocalStore, home: Path) -> SqlCatalog:
    """``store``'s catalog tables, keeping the bytes it copies in ``home``'s ``kept_folder``."""
    return SqlCatalog(store, kept_folder(home))


class SqlCatalog:
    """This machine's catalog: the functions above on ``store`` (closed with ``close``); ``kept``:
    the folder it copies versions into when they name no datastore (``kept_folder``)."""

    def __init__(self, store: LocalStore, kept: Path) -> None:
        self.store = store
        self.kept = kept

    def add_datastore(
        self, name: str, url: str, *, project: str | None, shared: bool, profile: str | None
    ) -> DatastoreRecord:
        return add_datastore(self.store, name, url, project=project, shared=shared, profile=profile)

    def datastores(self) -> list[DatastoreRecord]:
        return list_datastores(self.store)

    def datastore(self, name: str) -> DatastoreRecord:
        return get_datastore(self.store, name)

    def remove_datastore(self, name: str) -> None:
        remove_datastore(self.store, name)

    def add_dataset(
        self,
        name: str,
        source: str,
        *,
        copy_to: str | None,
        project: str | None,
        shared: bool,
        reference: bool = False,
    ) -> tuple[DatasetVersion, bool]:
        check_keeping(copy_to, reference)
        keep_in = None if reference else self.kept
        return add_dataset(self.store, name, source, copy_to, project=project, shared=shared, keep_in=keep_in)

    def datasets(self, name: str | None = None) -> list[DatasetVersion]:
        return list_datasets(self.store, name)

    def dataset(self, ref: str) -> DatasetVersion:
        # near: a server's routes answer a caller who may not see every project in their own words
        return get_dataset(self.store, ref, near=True)

    def remove_dataset(self, ref: str) -> list[DatasetVersion]:
        return remove_dataset(self.store, ref, self.kept)

    def readers(self, name: str, versions: Sequence[int]) -> int | None:
        return readers(self.store, name, versions)

    def fetch(self, version: DatasetVersion, directory: Path) -> None:
        fetch_tree(version.manifest, directory, f"dataset {version.ref}")

    def close(self) -> None:
        self.store.close()
