"""The model registry of a Phalanx server, through its REST API (``/api/v1/models``): the
``ModelRegistry`` door `phalanx models` and ``RemoteRun.register_model`` use once a server is in
play. The server applies its project roles (viewers read, editors register and move aliases) and
re-runs the ONNX check; its answers come back as the same records the local registry gives."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from phalanx.apiclient import Client, quote
from phalanx.errors import NotFound
from phalanx.store.registry_records import (
    ModelRef,
    ModelVersion,
    RegisteredModel,
    check_alias,
    check_model_name,
    parse_ref,
)

if TYPE_CHECKING:
    from phalanx.registry.door import ModelRegistry
    from phalanx.registry.service import Registry

# A registration is answered once the server has checked the model, in a process of its own that
# may run 5 minutes (phalanx.registry.parity_process.CHECK_SECONDS), after its turn behind the
# checks running then: a request's usual 2 minutes of silence ended the command with "cannot reach
# the server" while the server went on and registered the model.
REGISTER_SECONDS = 900.0


class RemoteRegistry:
    """The registry of the server behind ``client``."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def register(
        self,
        source: str,
        name: str,
        *,
        description: str | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> ModelVersion:
        experiment, _, model = source.partition("/")
        doc = {
            "experiment_id": experiment,
            "model": model or None,
            "description": description,
            "tags": dict(tags or {}),
        }
        path = f"/models/{quote(check_model_name(name))}/versions"
        return version_of(self.client.send("POST", path, doc, timeout=REGISTER_SECONDS))

    def resolve(self, ref: str | ModelRef) -> ModelVersion:
        parsed = parse_ref(ref) if isinstance(ref, str) else ref
        base = f"/models/{quote(check_model_name(parsed.name))}"
        if parsed.alias is not None:
            return version_of(self.client.get(f"{base}/aliases/{quote(check_alias(parsed.alias))}"))
        if parsed.version is not None:
            return version_of(self.client.get(f"{base}/versions/{parsed.version}"))
        versions = self.versions(parsed.name)
        if not versions:
            raise NotFound(f"model {parsed.name!r} has no versions")
        return max(versions, key=lambda v: v.version)

    def versions(self, name: str) -> list[ModelVersion]:
        doc = self.client.get(f"/models/{quote(check_model_name(name))}")
        return sorted((version_of(v) for v in doc["versions"]), key=lambda v: v.version)

    def models(self) -> list[RegisteredModel]:
        return [model_of(m) for m in self.client.get("/models")]

    def set_alias(self, name: str, alias: str, version: int) -> int | None:
        """Move (or create) ``name@alias``; the version it named before (None: it is new)."""
        try:
            before: int | None = self.resolve(ModelRef(name, alias=alias)).version
        except NotFound:
            before = None
        path = f"/models/{quote(check_model_name(name))}/aliases/{quote(check_alias(alias))}"
        self.client.send("PUT", path, {"version": int(version)})
        return before

    def delete_alias(self, name: str, alias: str) -> None:
        path = f"/models/{quote(check_model_name(name))}/aliases/{quote(check_alias(alias))}"
        self.client.request("DELETE", path)

    def remove(self, name: str, version: int | None = None) -> list[ModelVersion]:
        """Remove a version (``DELETE /models/{name}/versions/{n}``) or the model with every version
        (``DELETE /models/{name}``); the server refuses (409) one a service of it serves."""
        path = f"/models/{quote(check_model_name(name))}"
        if version is not None:
            path += f"/versions/{int(version)}"
        return [version_of(v) for v in self.client.request("DELETE", path)[1]]

    def update(
        self,
        name: str,
        version: int | None = None,
        *,
        description: str | None = None,
        tags: Mapping[str, str | None] | None = None,
    ) -> None:
        path = f"/models/{quote(check_model_name(name))}"
        if version is not None:
            path += f"/versions/{int(version)}"
        self.client.send("PATCH", path, {"description": description, "tags": dict(tags or {})})

    def read_bytes(self, version: ModelVersion) -> bytes:
        """The version's ONNX file (the server checks it against its sha256 before sending it)."""
        path = f"/models/{quote(version.name)}/versions/{version.version}/file"
        return self.client.raw("GET", path)[1]


def version_of(doc: dict[str, Any]) -> ModelVersion:
    """A version from the API's JSON (``ModelVersionOut``); its file is the server's (no path)."""
    return ModelVersion(
        name=doc["name"],
        version=int(doc["version"]),
        experiment_id=doc["experiment_id"],
        source=doc["source"],
        path="",
        sha256=doc["sha256"],
        size=int(doc["size"]),
        signature=dict(doc.get("signature") or {}),
        lineage=dict(doc.get("lineage") or {}),
        description=doc.get("description"),
        tags=dict(doc.get("tags") or {}),
        created_at=float(doc["created_at"]),
        aliases=list(doc.get("aliases") or []),
    )


def model_of(doc: dict[str, Any]) -> RegisteredModel:
    return RegisteredModel(
        name=doc["name"],
        description=doc.get("description"),
        tags=dict(doc.get("tags") or {}),
        created_at=float(doc["created_at"]),
        updated_at=float(doc["updated_at"]),
        latest_version=doc.get("latest_version"),
        aliases={str(k): int(v) for k, v in (doc.get("aliases") or {}).items()},
        project=doc.get("project") or "default",
    )


def _same_door(local: Registry, remote: RemoteRegistry) -> tuple[ModelRegistry, ModelRegistry]:
    """Never called: mypy checks here that both registries answer the one ModelRegistry door."""
    return local, remote
