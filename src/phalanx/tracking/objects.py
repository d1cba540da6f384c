"""Turning what a user passes to ``upload_artifact`` into a file: dict/list as JSON, a file or folder
path as itself, numpy arrays as .npy, pandas objects as .csv, PIL images as .png, bytes as they are,
anything else pickled. numpy, pandas and PIL are never imported here: an object is recognised by its
type's module, and its own methods write it. Standard library only."""

from __future__ import annotations

import json
import mimetypes
import os
import pickle
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class ArtifactError(ValueError):
    """The artifact cannot be stored as given (the message says how to fix it)."""


@dataclass(frozen=True)
class Prepared:
    kind: str  # "json", "file", "folder", "numpy", "pandas", "image", "bytes", "text", "pickle"
    filename: str  # the file's name inside the artifact's folder
    content_type: str
    source: Path | None = None  # an existing file/folder to copy
    payload: bytes | None = None  # or the bytes to write
    writer: Any = None  # or a callable writing the file at a path


def check_name(name: Any) -> str:
    if not isinstance(name, str) or not name.strip():
        raise ArtifactError("an artifact name must be a non-empty string")
    control = any(ord(c) < 32 or ord(c) == 127 for c in name)
    if "/" in name or "\\" in name or control or name in (".", "..") or name.startswith("."):
        raise ArtifactError(
            f"artifact name {name!r} cannot contain '/', '\\' or control characters (NUL, newline, "
            "tab...), nor start with '.': it names a file inside the experiment's folder and a URL"
        )
    return name


def _type_of(obj: Any) -> tuple[str, str]:
    t = type(obj)
    return (t.__module__.split(".")[0], t.__name__)


def prepare(name: str, obj: Any) -> Prepared:
    module, cls = _type_of(obj)
    if isinstance(obj, dict | list | tuple):
        try:
            payload = json.dumps(obj, indent=2, default=_json_default).encode()
        except (TypeError, ValueError) as exc:
            raise ArtifactError(f"artifact {name!r}: cannot write it as JSON: {exc}") from None
        return Prepared("json", f"{name}.json", "application/json", payload=payload)
    if isinstance(obj, bytes | bytearray | memoryview):
        return Prepared("bytes", f"{name}.bin", "application/octet-stream", payload=bytes(obj))
    if isinstance(obj, str | os.PathLike):
        path = Path(obj).expanduser()
        if path.is_dir():
            return Prepared("folder", path.resolve().name or name, "inode/directory", source=path)
        if path.is_file():
            return Prepared("file", path.name, _content_type(path), source=path)
        raise ArtifactError(
            f"artifact {name!r}: {str(obj)!r} is neither a file nor a folder; pass a path that exists, "
            "or a dict, bytes or an array to store the value itself"
        )
    if module == "numpy" and cls == "ndarray":
        return Prepared("numpy", f"{name}.npy", "application/x-npy", writer=lambda p: _np_save(obj, p))
    if module == "pandas" and cls in ("DataFrame", "Series"):
        return Prepared("pandas", f"{name}.csv", "text/csv", writer=lambda p: obj.to_csv(p))
    if module == "PIL" and hasattr(obj, "save") and hasattr(obj, "mode"):
        return Prepared("image", f"{name}.png", "image/png", writer=lambda p: obj.save(p, format="PNG"))
    try:
        payload = pickle.dumps(obj)
    except Exception as exc:
        raise ArtifactError(f"artifact {name!r}: cannot serialise a {module}.{cls}: {exc}") from None
    return Prepared("pickle", f"{name}.pkl", "application/python-pickle", payload=payload)


def _np_save(array: Any, path: Path) -> None:
    with open(path, "wb") as fh:
        sys.modules["numpy"].save(fh, array, allow_pickle=False)


def _json_default(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


def _content_type(path: Path) -> str:
    return mimetypes.guess_type(path.name)[0] or "application/octet-stream"


def materialize(prepared: Prepared, target: Path) -> int:
    """Write the artifact at ``target`` (a new path); returns its size in bytes."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if prepared.source is not None:
        if prepared.source.is_dir():
            shutil.copytree(prepared.source, target)
            return sum(p.stat().st_size for p in target.rglob("*") if p.is_file())
        shutil.copyfile(prepared.source, target)
    elif prepared.payload is not None:
        target.write_bytes(prepared.payload)
    else:
        prepared.writer(target)
    return target.stat().st_size
