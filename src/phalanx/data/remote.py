"""The data catalog on a server's door: ``RemoteCatalog`` answers the catalog's calls (``Catalog``)
through the server's API, which applies its project rules (docs/data.md#on-a-server), and
``open_catalog`` picks the door: a server's client, or this machine's store."""

from __future__ import annotations

import urllib.parse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from phalanx.apiclient import Client, quote
from phalanx.config import Settings
from phalanx.errors import NotFound
from phalanx.spec.inputs import parse_dataset_ref
from phalanx.store import open_store
from phalanx.store.catalog import (
    Catalog,
    DatasetVersion,
    DatastoreRecord,
    catalog_of,
    check_keeping,
)
from phalanx.store.manifest import fetch_tree


class RemoteCatalog:
    """The catalog of the server behind ``client``; names and errors as this machine's."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def add_datastore(
        self, name: str, url: str, *, project: str | None, shared: bool, profile: str | None
    ) -> DatastoreRecord:
        doc = {"name": name, "url": url, "project": project, "shared": shared, "profile": profile}
        return DatastoreRecord.from_json(self.client.send("POST", "/datastores", doc))

    def datastores(self) -> list[DatastoreRecord]:
        return [DatastoreRecord.from_json(d) for d in self.client.get("/datastores")]

    def datastore(self, name: str) -> DatastoreRecord:
        return DatastoreRecord.from_json(self.client.get(f"/datastores/{quote(name)}"))

    def remove_datastore(self, name: str) -> None:
        self.client.send("DELETE", f"/datastores/{quote(name)}")

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
        doc = {
            "name": name,
            "source": source,
            "copy_to": copy_to,
            "reference": reference,
            "project": project,
            "shared": shared,
        }
        answer: dict[str, Any] = self.client.send("POST", "/datasets", doc)
        return DatasetVersion.from_json(answer), bool(answer["new"])

    def datasets(self, name: str | None = None) -> list[DatasetVersion]:
        return [DatasetVersion.from_json(v) for v in self.client.get("/datasets", name=name, manifest="true")]

    def dataset(self, ref: str) -> DatasetVersion:
        name, version = parse_dataset_ref(ref)
        path = f"/datasets/{quote(name)}/versions/{version or 'latest'}"
        return DatasetVersion.from_json(self.client.get(path))

    def remove_dataset(self, ref: str) -> list[DatasetVersion]:
        name, version = parse_dataset_ref(ref)
        which = None if "@" not in ref else str(version or "latest")
        answer = self.client.request("DELETE", _query(f"/datasets/{quote(name)}", which))[1]
        return [DatasetVersion.from_json(v) for v in answer]

    def readers(self, name: str, versions: Sequence[int]) -> int | None:
        """Counted by the server, among the experiments of the caller's projects; None from a server
        without the route (older than this client): `data rm` then asks without a count."""
        try:
            answer = self.client.get(
                f"/datasets/{quote(name)}/readers", versions=",".join(map(str, versions))
            )
        except NotFound:
            return None
        return int(answer["experiments"])

    def fetch(self, version: DatasetVersion, directory: Path) -> None:
        """The files through the server (``GET .../files/PATH``), checked as this machine's are."""
        files = _ApiFiles(self.client, f"/datasets/{quote(version.name)}/versions/{version.version}/files")
        fetch_tree(version.manifest, directory, f"dataset {version.ref}", source=(files, ""))

    def close(self) -> None:
        """Nothing held between requests."""


class _ApiFiles:
    """A dataset version's files on a server, as ``copy_tree`` (``fetch_tree``) reads a filesystem."""

    def __init__(self, client: Client, base: str) -> None:
        self.client = client
        self.base = base

    def open(self, path: str, mode: str) -> Any:
        """The file's bytes, streamed (``path``: ``/`` and its path in the version)."""
        return self.client.open("GET", f"{self.base}/{urllib.parse.quote(path.lstrip('/'))}")


def _query(path: str, version: str | None) -> str:
    return path if version is None else f"{path}?version={quote(version)}"


def open_catalog(client: Client | None, settings: Settings) -> Catalog:
    """The server's catalog when ``client`` is one (``logins.choose``), else this machine's."""
    if client is not None:
        return RemoteCatalog(client)
    return catalog_of(open_store(settings), settings.home)
