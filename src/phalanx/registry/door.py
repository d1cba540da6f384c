"""The model registry's one interface, two doors: ``ModelRegistry`` is what `phalanx models`, the
Run's ``register_model`` and ``Model`` ask of a registry; ``phalanx.registry.service.Registry``
answers it from this machine's store, ``phalanx.registry.remote.RemoteRegistry`` from a server's
API. Both give the same records (ModelVersion, RegisteredModel), so every command and call renders
one shape (``version_json``) wherever the registry lives.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from phalanx.registry.service import version_json
from phalanx.store.registry_records import ModelRef, ModelVersion, RegisteredModel, check_alias, parse_ref


class ModelRegistry(Protocol):
    def register(
        self,
        source: str,
        name: str,
        *,
        description: str | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> ModelVersion: ...

    def resolve(self, ref: str | ModelRef) -> ModelVersion: ...

    def versions(self, name: str) -> list[ModelVersion]: ...

    def models(self) -> list[RegisteredModel]: ...

    def set_alias(self, name: str, alias: str, version: int) -> int | None: ...

    def delete_alias(self, name: str, alias: str) -> None: ...

    def remove(self, name: str, version: int | None = None) -> list[ModelVersion]: ...

    def update(
        self,
        name: str,
        version: int | None = None,
        *,
        description: str | None = None,
        tags: Mapping[str, str | None] | None = None,
    ) -> None: ...

    def read_bytes(self, version: ModelVersion) -> bytes: ...


def register_version(
    registry: ModelRegistry,
    source: str,
    name: str,
    description: str | None,
    tags: Mapping[str, str] | None,
    alias: str | None,
) -> dict[str, Any]:
    """Register ``EXPERIMENT[/MODEL]`` as the next version of ``name`` (and point ``name@alias`` at
    it); the new version's JSON. The alias is checked before anything is registered."""
    if alias is not None:
        check_alias(alias)
    created = registry.register(source, name, description=description, tags=tags)
    if alias is not None:
        registry.set_alias(created.name, alias, created.version)
        created = registry.resolve(ModelRef(created.name, version=created.version))
    return version_json(created)


def download_version(registry: ModelRegistry, ref: str, folder: Path) -> Path:
    """Write ``ref``'s ONNX file as ``folder/NAME-vN.onnx`` (through a temporary name); its path."""
    version = registry.resolve(parse_ref(ref))
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{version.name}-v{version.version}.onnx"
    tmp = target.with_name(f".{target.name}.part")
    tmp.write_bytes(registry.read_bytes(version))
    tmp.replace(target)
    return target
