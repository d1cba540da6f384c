"""Seed 004's data handles: ``Datastore.get(ws_or_home, NAME)`` and ``Dataset.get(ws_or_home, REF)``,
passed in an estimator's ``script_params`` (``{'--data_dir': ds}``) or ``inputs=[...]``.

A handle is an input waiting to be resolved: in a command it stands for the replica's local path of
the data (``${PHALANX_INPUT_<NAME>}``, set on every replica before it starts); ``.path('sub/dir')``
narrows a datastore to a folder, ``.as_mount()`` and ``.as_download()`` choose the mode (a datastore
is mounted by default, as in Azure ML; a dataset downloaded).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from phalanx.config import Settings
from phalanx.spec.inputs import InputSpec, shell_ref
from phalanx.store import open_store
from phalanx.store.artifacts import safe_path


def _settings(ws_or_home: Any) -> Any:
    """Settings from a Phalanx home (path), Settings, an object holding ``.settings`` (a workspace,
    an Experiment), or None (the environment's)."""
    if ws_or_home is None:
        return Settings()
    if isinstance(ws_or_home, Settings):
        return ws_or_home
    if isinstance(ws_or_home, str | Path):
        return Settings(home=Path(ws_or_home).expanduser())
    found = getattr(ws_or_home, "settings", None)
    if isinstance(found, Settings):
        return found
    raise TypeError(
        f"expected a Phalanx home folder, Settings or a workspace, got {type(ws_or_home).__name__}"
    )


def _open(ws_or_home: Any) -> Any:
    return open_store(_settings(ws_or_home))


@dataclass(frozen=True)
class Datastore:
    name: str
    url: str
    sub: str = ""
    mode: str = "mount"

    @classmethod
    def get(cls, ws_or_home: Any, name: str) -> Datastore:
        """The datastore ``name``; NotFound (exit 2) naming the ones there are."""
        from phalanx.store import catalog  # why: `python -m phalanx.data.nodefetch` on a node: no SQLAlchemy

        store = _open(ws_or_home)
        try:
            record = catalog.get_datastore(store, name)
        finally:
            store.close()
        return cls(record.name, record.url)

    def path(self, sub: str) -> Datastore:
        joined = f"{self.sub}/{sub}" if self.sub else sub
        return replace(self, sub=safe_path(joined) if joined.strip("/") else "")

    def as_mount(self) -> Datastore:
        return replace(self, mode="mount")

    def as_download(self) -> Datastore:
        return replace(self, mode="download")

    @property
    def input_name(self) -> str:
        return _slug(f"{self.name}_{self.sub}" if self.sub else self.name)

    def as_input(self) -> InputSpec:
        return InputSpec(name=self.input_name, datastore=self.name, path=self.sub, mode=self.mode)

    def __str__(self) -> str:
        return shell_ref(self.input_name)


@dataclass(frozen=True)
class Dataset:
    name: str
    version: int
    mode: str = "download"

    @classmethod
    def get(cls, ws_or_home: Any, ref: str) -> Dataset:
        """``digits``, ``digits@latest`` or ``digits@3``; NotFound (exit 2) when there is none."""
        from phalanx.store import catalog  # why: `python -m phalanx.data.nodefetch` on a node: no SQLAlchemy

        store = _open(ws_or_home)
        try:
            found = catalog.get_dataset(store, ref)
        finally:
            store.close()
        return cls(found.name, found.version)

    def as_mount(self) -> Dataset:
        return replace(self, mode="mount")

    def as_download(self) -> Dataset:
        return replace(self, mode="download")

    @property
    def input_name(self) -> str:
        return _slug(f"{self.name}_v{self.version}")

    def as_input(self) -> InputSpec:
        return InputSpec(name=self.input_name, dataset=f"{self.name}@{self.version}", mode=self.mode)

    def __str__(self) -> str:
        return shell_ref(self.input_name)


def _slug(text: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9_-]", "_", text).strip("_-") or "data"
    return ("_" + slug if slug[0].isdigit() else slug)[:64]
