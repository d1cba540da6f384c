"""Inputs as written: the data an experiment reads, in the file's ``inputs:`` section or the
estimator's ``inputs=[...]``; parsed and named here, with no store or file system, so the spec, the
plan and the estimators read them without reaching up to ``phalanx.data`` (which resolves and fetches
them: see ``phalanx.data.inputs``).

Every replica finds input NAME at the same local path, in the environment variable
``PHALANX_INPUT_<NAME>`` (upper case, other characters as ``_``); ``{{ inputs.NAME }}`` in run.cmd
becomes that variable (expanded by the replica's shell), so the command is the same on every engine.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from phalanx.errors import UsageError

MODES = ("download", "mount")
INPUT_KEYS = ("name", "dataset", "datastore", "path", "mode")
ENV_PREFIX = "PHALANX_INPUT_"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")
# a dataset's or a datastore's name in the data catalog (phalanx.store.catalog keeps them)
CATALOG_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_VERSION = re.compile(r"^[0-9]+$")
_REF_FORMS = "write NAME, NAME@latest or NAME@VERSION (e.g. digits@3)"


@dataclass(frozen=True)
class InputSpec:
    """One input as written: a dataset reference (``digits@3``) or a datastore (and a folder in it)."""

    name: str
    dataset: str | None = None
    datastore: str | None = None
    path: str = ""
    mode: str = "download"

    def __post_init__(self) -> None:
        problem = self.problem()
        if problem:
            raise UsageError(f"input {self.name!r}: {problem}")

    def problem(self) -> str | None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            return "a name is letters, digits, '_' and '-' (at most 64, starting with a letter or '_')"
        if (self.dataset is None) == (self.datastore is None):
            return "give one of dataset: NAME[@VERSION] or datastore: NAME"
        if self.dataset is not None and (wrong := dataset_ref_problem(self.dataset)):
            return wrong
        if self.mode not in MODES:
            return f"mode {self.mode!r}: use download or mount"
        if self.path and self.dataset is not None:
            return "path: is a folder inside a datastore; a dataset is used whole"
        if self.path.strip("/ ") and not _inside(self.path):
            return f"path {self.path!r}: give a folder inside the datastore, relative, without '..'"
        return None

    @property
    def env(self) -> str:
        return env_name(self.name)

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"name": self.name, "mode": self.mode}
        if self.dataset is not None:
            doc["dataset"] = self.dataset
        else:
            doc["datastore"] = self.datastore
            if self.path:
                doc["path"] = self.path
        return doc


def catalog_name_problem(name: object, what: str) -> str | None:
    """What is wrong with ``name`` as a ``what`` (dataset, datastore) name in the catalog, if anything."""
    if isinstance(name, str) and CATALOG_NAME.match(name):
        return None
    return (
        f"{what} name {name!r}: use letters, digits, '.', '_' and '-' (at most 128, not starting with"
        " '.', '_' or '-')"
    )


def check_catalog_name(name: str, what: str) -> str:
    """``name`` if it can name a ``what`` (dataset, datastore) in the catalog; UsageError if not."""
    problem = catalog_name_problem(name, what)
    if problem:
        raise UsageError(problem)
    return name


def dataset_ref_problem(ref: object) -> str | None:
    """What is wrong with a dataset reference (``digits``, ``digits@latest``, ``digits@3``), if
    anything: the one rule the file's check, the estimators and the catalog's look-up all apply."""
    if not isinstance(ref, str) or not ref.strip():
        return f"dataset {ref!r}: {_REF_FORMS}"
    name, at, version = ref.strip().partition("@")
    if at and version != "latest" and not _VERSION.match(version):
        return f"dataset {ref!r}: the version {version!r} is neither a whole number nor latest; {_REF_FORMS}"
    return catalog_name_problem(name, "dataset")


def parse_dataset_ref(ref: str) -> tuple[str, int | None]:
    """``name``, ``name@latest`` -> (name, None); ``name@3`` -> (name, 3); UsageError if malformed."""
    problem = dataset_ref_problem(ref)
    if problem:
        raise UsageError(problem)
    name, _, version = ref.strip().partition("@")
    return name, (int(version) if version and version != "latest" else None)


def _inside(path: str) -> bool:
    """Whether ``path`` names a folder inside its datastore (the artifact store's rule, checked again
    when the input is resolved: ``store.artifacts.safe_path``), so a file that names one outside is
    refused with the file's other mistakes, before anything is recorded."""
    if "\x00" in path or "\\" in path or "://" in path or path.startswith("/"):
        return False
    return ".." not in path.split("/")


def env_name(name: str) -> str:
    return ENV_PREFIX + re.sub(r"[^A-Za-z0-9]", "_", name).upper()


def shell_ref(name: str) -> str:
    """What ``{{ inputs.NAME }}`` becomes in a command: the variable, expanded by the shell."""
    return "${" + env_name(name) + "}"


def parse_inputs(value: Any, where: str = "inputs") -> tuple[InputSpec, ...]:
    """A list of mappings (the file's section, the estimator's argument) -> InputSpecs; UsageError
    naming ``where[i].key`` for what is wrong."""
    if value is None:
        return ()
    if not isinstance(value, Sequence) or isinstance(value, str | bytes):
        raise UsageError(f"{where}: expected a list like [{{name: digits, dataset: digits@latest}}]")
    out: list[InputSpec] = []
    for i, item in enumerate(value):
        if isinstance(item, InputSpec):
            out.append(item)
            continue
        if hasattr(item, "as_input"):
            out.append(item.as_input())
            continue
        if not isinstance(item, Mapping):
            raise UsageError(f"{where}[{i}]: expected a mapping with name and dataset or datastore")
        unknown = [k for k in item if k not in INPUT_KEYS]
        if unknown:
            raise UsageError(f"{where}[{i}].{unknown[0]}: unknown key; use {', '.join(INPUT_KEYS)}")
        try:
            out.append(
                InputSpec(
                    name=item.get("name"),  # type: ignore[arg-type]
                    dataset=_text(item.get("dataset")),
                    datastore=_text(item.get("datastore")),
                    path=_text(item.get("path")) or "",
                    mode=str(item.get("mode") or "download"),
                )
            )
        except UsageError as exc:
            raise UsageError(f"{where}[{i}]: {exc.message}") from None
    names = [s.name for s in out]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup:
        raise UsageError(f"{where}: two inputs are named {dup!r}; names must differ")
    return tuple(out)


def from_record(record: Mapping[str, Any]) -> InputSpec:
    """The input a lineage record was resolved from, pinned: a dataset at the version it used."""
    mode = str(record.get("requested_mode") or record.get("mode") or "download")
    if record.get("kind") == "dataset":
        return InputSpec(name=str(record["name"]), dataset=str(record["ref"]), mode=mode)
    return InputSpec(
        name=str(record["name"]),
        datastore=str(record["datastore"]),
        path=str(record.get("path") or ""),
        mode=mode,
    )


def _text(value: Any) -> str | None:
    return None if value is None else str(value)
