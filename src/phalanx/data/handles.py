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
from typing import TYPE_CHECKING, Protocol

from phalanx.config import Settings
from phalanx.logins import choose
from phalanx.spec.inputs import InputSpec, shell_ref
from phalanx.store.artifacts import safe_path

if TYPE_CHECKING:
    from phalanx.store.catalog import Catalog


class Workspace(Protocol):
    """What holds a catalog of its own: an estimators ``Experiment`` (the server's with server=URL,
    else this machine's: where its submit() runs)."""

    def catalog(self) -> Catalog: ...


Where = Workspace | Settings | str | Path | None


def open_where(where: Where) -> Catalog:
    """The catalog ``where`` names: a workspace's own; else the Phalanx home's (a path, Settings,
    or None: the environment's), which is the server's after `phalanx login` in that home."""
    from phalanx.data.remote import open_catalog  # why: `python -m phalanx.data.nodefetch`: no SQLAlchemy

    if where is not None and not isinstance(where, Settings | str | Path):
        return where.catalog()
    if where is None:
        settings = Settings()
    elif isinstance(where, Settings):
        settings = where
    else:
        settings = Settings(home=Path(where).expanduser())
    return open_catalog(choose(None, False, settings=settings, say=False, local_option=None), settings)


@dataclass(frozen=True)
class Datastore:
    name: str
    url: str
    sub: str = ""
    mode: str = "mount"

    @classmethod
    def get(cls, ws_or_home: Where, name: str) -> Datastore:
        """The datastore ``name`` (the server's when a server is in play: ``open_where``); NotFound
        (exit 2) naming the ones there are."""
        catalog = open_where(ws_or_home)
        try:
            record = catalog.datastore(name)
        finally:
            catalog.close()
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
    def get(cls, ws_or_home: Where, ref: str) -> Dataset:
        """``digits``, ``digits@latest`` or ``digits@3`` (the server's version when a server is in
        play: ``open_where``); NotFound (exit 2) when there is none."""
        catalog = open_where(ws_or_home)
        try:
            found = catalog.dataset(ref)
        finally:
            catalog.close()
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
