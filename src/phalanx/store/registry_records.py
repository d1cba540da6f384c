"""The model registry's records: a registered model (a name), its versions and aliases, and the
``NAME[@alias|@N]`` reference every door (CLI, Python, REST, ``phalanx serve``) parses the same way.

In the store's vocabulary (the store reads and writes them; ``phalanx.registry`` sits above it)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from phalanx.errors import UsageError

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
# an alias is a word, never a number: `NAME@3` is version 3, `NAME@prod` the alias prod
_ALIAS = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")


@dataclass(frozen=True)
class ModelVersion:
    """Version ``version`` of registered model ``name``: an ONNX file copied out of an experiment,
    with what made it (lineage) and what it takes and gives (signature)."""

    name: str
    version: int
    experiment_id: str
    source: str  # the model's file name in its experiment (digits.onnx)
    path: str  # where the registry's copy lives in the artifact store
    sha256: str
    size: int
    signature: dict[str, Any]  # {"inputs": [{name, dtype, shape}], "outputs": [...]}
    lineage: dict[str, Any]  # experiment name/project, params, final metrics, snapshot, parity
    description: str | None
    tags: dict[str, str]
    created_at: float
    aliases: list[str] = field(default_factory=list)

    @property
    def parity(self) -> dict[str, Any]:
        value = self.lineage.get("parity")
        return value if isinstance(value, dict) else {}


@dataclass(frozen=True)
class RegisteredModel:
    name: str
    description: str | None
    tags: dict[str, str]
    created_at: float
    updated_at: float
    latest_version: int | None
    aliases: dict[str, int]  # alias -> version
    project: str = "default"  # whose viewers read it and whose editors change it (a team server)


@dataclass(frozen=True)
class ModelRef:
    """``NAME``, ``NAME@N`` or ``NAME@alias``: a name with at most one of version and alias."""

    name: str
    version: int | None = None
    alias: str | None = None

    def __str__(self) -> str:
        if self.alias:
            return f"{self.name}@{self.alias}"
        if self.version is not None:
            return f"{self.name}@{self.version}"
        return self.name


def check_model_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise UsageError(
            f"model name {name!r}: use letters, digits, '.', '_' and '-' (1 to 100, starting with a "
            "letter or digit), e.g. digits-mlp"
        )
    return name


def check_alias(alias: str) -> str:
    if not isinstance(alias, str) or not _ALIAS.match(alias):
        raise UsageError(
            f"alias {alias!r}: a word of letters, digits, '_' and '-' starting with a letter "
            "(at most 64), e.g. prod or staging; a number names a version"
        )
    return alias


def parse_ref(text: str) -> ModelRef:
    """``digits`` -> the latest version; ``digits@3`` -> version 3; ``digits@prod`` -> the alias."""
    name, sep, rest = str(text).partition("@")
    check_model_name(name)
    if not sep:
        return ModelRef(name)
    if rest.isdigit() and int(rest) > 0:
        return ModelRef(name, version=int(rest))
    if rest.isdigit():
        raise UsageError(f"{text!r}: versions of a model count from 1 (NAME@1 is its first)")
    if not rest:
        raise UsageError(f"{text!r}: give a version or an alias after '@' (NAME@3, NAME@prod)")
    return ModelRef(name, alias=check_alias(rest))
