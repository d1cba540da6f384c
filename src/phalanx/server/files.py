"""The server's door to artifact bytes: read, stream and write files under one experiment's folder.

Every path from a request is checked by ``safe_relpath`` (the store's ``safe_path``) before it
touches the artifact store, so no name can reach outside ``<artifacts root>/<experiment id>/`` (no
``..``, no absolute paths, no backslashes, no NUL). On a local artifact root a symbolic link inside
the folder (planted by anyone who can write there, e.g. on a shared file system) cannot lead out of
it either: a path whose real location is outside the experiment's folder is "not found", for reads
and for writes. The bytes live in the same fsspec artifact store the ingester writes.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import AsyncIterator, Iterator
from typing import Any

from phalanx.errors import Conflict, NotFound, UsageError
from phalanx.ids import random_hex
from phalanx.store.artifacts import open_fs, safe_path

CHUNK = 1024 * 1024
# One sanitizer for every artifact path (the store's): the server's name for it.
safe_relpath = safe_path


class ArtifactFiles:
    """Files of experiments inside an fsspec URL (a local folder by default)."""

    def __init__(self, root: str) -> None:
        self.fs, self.root = open_fs(root)
        self.root = self.root.rstrip("/")
        self.local = "file" in _protocols(self.fs)

    def _folder(self, experiment_id: str) -> str:
        if not experiment_id or "/" in experiment_id or experiment_id in (".", ".."):
            raise UsageError(f"invalid experiment id {experiment_id!r}")
        return f"{self.root}/{experiment_id}"

    def _full(self, experiment_id: str, path: str) -> str:
        full = f"{self._folder(experiment_id)}/{safe_relpath(path)}"
        if not self._inside(experiment_id, full):
            raise NotFound(
                f"no file {path!r} in experiment {experiment_id} (it is a link that leads outside the "
                "experiment's folder)"
            )
        return full

    def _inside(self, experiment_id: str, full: str) -> bool:
        """Whether ``full`` really lies in the experiment's folder once symbolic links are followed
        (always true on object stores, which have no links)."""
        if "file" not in _protocols(self.fs):
            return True
        base = os.path.realpath(f"{self.root}/{experiment_id}")
        return os.path.realpath(full).startswith(base + os.sep)

    def size(self, experiment_id: str, path: str) -> int:
        full = self._full(experiment_id, path)
        if not self.fs.isfile(full):
            raise NotFound(f"no file {path!r} in experiment {experiment_id}")
        return int(self.fs.size(full))

    def is_dir(self, experiment_id: str, path: str) -> bool:
        return bool(self.fs.isdir(self._full(experiment_id, path)))

    def walk(self, experiment_id: str, path: str) -> list[str]:
        """Relative paths of the files under a folder artifact, sorted."""
        base = self._full(experiment_id, path)
        found: list[str] = self.fs.find(base)
        # a link inside the folder that leads out of it is left out of listings and zips
        return sorted(posixpath.relpath(f, base) for f in found if self._inside(experiment_id, f))

    def files(self, experiment_id: str) -> list[str]:
        """Relative paths of every file in the experiment's folder, sorted (none: no folder yet)."""
        base = self._folder(experiment_id)
        if not self.fs.isdir(base):
            return []
        found: list[str] = self.fs.find(base)
        return sorted(posixpath.relpath(f, base) for f in found if self._inside(experiment_id, f))

    def read(self, experiment_id: str, path: str, limit: int | None = None) -> bytes:
        full = self._full(experiment_id, path)
        if not self.fs.isfile(full):
            raise NotFound(f"no file {path!r} in experiment {experiment_id}")
        with self.fs.open(full, "rb") as f:
            data: bytes = f.read() if limit is None else f.read(limit)
        return data

    def iter_bytes(self, experiment_id: str, path: str) -> Iterator[bytes]:
        full = self._full(experiment_id, path)
        if not self.fs.isfile(full):
            raise NotFound(f"no file {path!r} in experiment {experiment_id}")

        def chunks() -> Iterator[bytes]:
            with self.fs.open(full, "rb") as f:
                while chunk := f.read(CHUNK):
                    yield chunk

        return chunks()

    async def write_stream(self, experiment_id: str, path: str, body: AsyncIterator[bytes]) -> int:
        """Write a request body to ``path``; a partial upload never replaces a complete file."""
        full = self._full(experiment_id, path)
        # an object store shows an object only once its upload completes: no temporary name there
        tmp = f"{full}.tmp-{random_hex(8)}" if self.local else full
        if self.fs.isdir(full):
            raise Conflict(f"{path!r} is a folder in experiment {experiment_id}: it cannot become a file")
        try:
            self.fs.makedirs(posixpath.dirname(full), exist_ok=True)
            f: Any = self.fs.open(tmp, "wb")
        except (FileExistsError, NotADirectoryError):
            raise Conflict(
                f"a folder of {path!r} is a file in experiment {experiment_id}: choose another path"
            ) from None
        size = 0
        try:
            async for chunk in body:
                if chunk:
                    f.write(chunk)
                    size += len(chunk)
            f.close()
            if tmp != full:
                self.fs.mv(tmp, full)
        except BaseException:
            if not self.local and hasattr(f, "discard"):
                f.discard()  # abort the multipart upload: the half-sent object never appears
            else:
                f.close()
                if self.fs.exists(tmp):
                    self.fs.rm(tmp)
            raise
        return size


def _protocols(fs: Any) -> tuple[str, ...]:
    protocol = fs.protocol
    return (protocol,) if isinstance(protocol, str) else tuple(protocol)
