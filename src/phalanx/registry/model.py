"""``Model``: the registry from Python, named as Azure ML names it (``Model.register``,
``Model(name, version=...)``, ``model.download``)::

    from phalanx.registry import Model
    m = Model.register(run.id, "digits", description="MLP on the digits")  # version N
    m.set_alias("prod")
    Model("digits@prod").download("out/")
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from phalanx.config import Settings
from phalanx.registry.checker import check_in_process
from phalanx.registry.service import Registry, model_json, version_json
from phalanx.store import open_store
from phalanx.store.registry_records import ModelRef, ModelVersion, parse_ref

if TYPE_CHECKING:
    from phalanx.store.base import LocalStore


def _registry(store: LocalStore | None) -> Registry:
    if store is None:
        store = open_store(Settings())
    # the embedded mode: the user's own file, checked in the user's own process (registry.checker)
    return Registry(store, check_in_process)


class Model:
    """One version of a registered model. ``Model("digits")`` is the latest, ``Model("digits@3")``
    or ``Model("digits", version=3)`` version 3, ``Model("digits@prod")`` or
    ``Model("digits", alias="prod")`` the version the alias names now."""

    def __init__(
        self,
        name: str,
        version: int | None = None,
        *,
        alias: str | None = None,
        store: LocalStore | None = None,
    ) -> None:
        ref = parse_ref(name)
        if version is not None or alias is not None:
            ref = ModelRef(ref.name, version=version, alias=alias)
        self._registry = _registry(store)
        self._version: ModelVersion = self._registry.resolve(ref)

    @classmethod
    def register(
        cls,
        experiment: str,
        model_name: str,
        *,
        model: str | None = None,
        description: str | None = None,
        tags: Mapping[str, str] | None = None,
        store: LocalStore | None = None,
    ) -> Model:
        """Register ``experiment``'s ONNX model (``model`` names it when it saved several) as the next
        version of ``model_name``. Raises ParityFailed for a file that fails its ONNX check."""
        registry = _registry(store)
        source = experiment if model is None else f"{experiment}/{model}"
        created = registry.register(source, model_name, description=description, tags=tags)
        return cls(created.name, created.version, store=registry.store)

    @staticmethod
    def list(store: LocalStore | None = None) -> builtins.list[dict[str, Any]]:
        """Every registered model: name, latest version, aliases, description, tags."""
        return [model_json(m) for m in _registry(store).models()]

    @property
    def name(self) -> str:
        return self._version.name

    @property
    def version(self) -> int:
        return self._version.version

    @property
    def aliases(self) -> builtins.list[str]:
        return list(self._version.aliases)

    @property
    def experiment_id(self) -> str:
        return self._version.experiment_id

    @property
    def signature(self) -> dict[str, Any]:
        return dict(self._version.signature)

    @property
    def lineage(self) -> dict[str, Any]:
        return dict(self._version.lineage)

    @property
    def tags(self) -> dict[str, str]:
        return dict(self._version.tags)

    @property
    def description(self) -> str | None:
        return self._version.description

    def set_alias(self, alias: str) -> None:
        """Point ``name@alias`` at this version (moving it from any other)."""
        self._registry.set_alias(self.name, alias, self.version)
        self._version = self._registry.resolve(ModelRef(self.name, version=self.version))

    def download(self, target_dir: str | Path = ".") -> Path:
        """Write the ONNX file as ``target_dir/NAME-vN.onnx``; returns its path."""
        folder = Path(target_dir)
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / f"{self.name}-v{self.version}.onnx"
        tmp = target.with_name(f".{target.name}.part")
        tmp.write_bytes(self._registry.read_bytes(self._version))
        tmp.replace(target)
        return target

    def to_json(self) -> dict[str, Any]:
        return version_json(self._version)

    def __repr__(self) -> str:
        return f"Model({self.name!r}, version={self.version})"
