"""What a dataset version is made of: every file's relative path, size and sha256, and the digest of
that list (the version's identity and its address in the download cache). Files are read in 1 MiB
pieces on any fsspec filesystem, so a dataset of any size is hashed and copied in bounded memory.
In the store's vocabulary: the catalog records manifests, and ``phalanx.data`` sits above the store.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import posixpath
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from phalanx.errors import UsageError
from phalanx.ids import random_hex
from phalanx.store.artifacts import open_fs, safe_path

CHUNK = 1024 * 1024


class DataChanged(UsageError):
    """A referenced file no longer has the bytes its dataset version recorded: refused, never used."""

    code = "conflict"


@dataclass(frozen=True)
class FileEntry:
    path: str  # relative, POSIX
    size: int
    sha256: str

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "size": self.size, "sha256": self.sha256}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> FileEntry:
        return cls(str(doc["path"]), int(doc["size"]), str(doc["sha256"]))


@dataclass(frozen=True)
class Manifest:
    url: str  # the folder the paths are relative to
    files: tuple[FileEntry, ...]

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def digest(self) -> str:
        """sha256 of the sorted (path, size, sha256) lines: the same content has the same digest
        wherever it is stored."""
        h = hashlib.sha256()
        for f in sorted(self.files, key=lambda f: f.path):
            h.update(f"{f.path}\0{f.size}\0{f.sha256}\n".encode())
        return h.hexdigest()


def filesystem(url: str, credentials: Mapping[str, Any] | None = None) -> tuple[Any, str]:
    """fsspec filesystem and path of a URL or local path (s3:// with the store's part sizes and
    retries, and the s3 extra's message when s3fs is missing); ``credentials``: whose to read with."""
    return open_fs(url, credentials)


def join_url(base: str, sub: str) -> str:
    """``base/sub`` where ``sub`` may not leave ``base`` (the artifact store's path rules)."""
    if not sub.strip("/ "):
        return base
    return f"{base.rstrip('/')}/{safe_path(sub)}"


def build_manifest(url: str) -> Manifest:
    """Hash every file under ``url`` (a folder, or one file: then its folder with that one file)."""
    fs, root = filesystem(url)
    if not fs.exists(root):
        raise UsageError(f"{url!r}: no such file or folder")
    if fs.isfile(root):
        folder, names = posixpath.dirname(root), [root]
        base = url[: len(url) - len(posixpath.basename(root))].rstrip("/") or "/"
    else:
        folder, names, base = root.rstrip("/"), sorted(str(p) for p in fs.find(root)), url
    files = []
    for full in names:
        rel = posixpath.relpath(full, folder)
        with fs.open(full, "rb") as fh:
            digest, size = _hash(fh)
        files.append(FileEntry(rel, size, digest))
    return Manifest(base.rstrip("/") if base != "/" else base, tuple(files))


def _hash(fh: BinaryIO) -> tuple[str, int]:
    h = hashlib.sha256()
    size = 0
    while chunk := fh.read(CHUNK):
        h.update(chunk)
        size += len(chunk)
    return h.hexdigest(), size


def _chunks(fh: BinaryIO) -> Iterator[bytes]:
    while chunk := fh.read(CHUNK):
        yield chunk


def copy_file(fs: Any, source: str, entry: FileEntry, dest: Any, target: str, what: str) -> None:
    """Copy one file of a manifest from ``fs:source`` to ``dest:target`` checking its sha256 on the
    way; DataChanged (the partial copy removed) when the bytes are not the recorded ones."""
    h = hashlib.sha256()
    size = 0
    try:
        with fs.open(source, "rb") as src, dest.open(target, "wb") as out:
            for chunk in _chunks(src):
                h.update(chunk)
                size += len(chunk)
                out.write(chunk)
    except FileNotFoundError:
        raise DataChanged(f"{what}: file {entry.path!r} is gone from {posixpath.dirname(source)}") from None
    if entry.sha256 and (h.hexdigest() != entry.sha256 or size != entry.size):  # "": never hashed
        dest.rm(target)
        raise DataChanged(
            f"{what}: file {entry.path!r} changed since the version was recorded ({size} bytes, sha256 "
            f"{h.hexdigest()[:12]}..., recorded {entry.size} bytes, {entry.sha256[:12]}...); refused. "
            "Record the new content as a new version with `phalanx data add NAME PATH`"
        )


def copy_tree(
    manifest: Manifest, target_url: str, what: str = "dataset", source: tuple[Any, str] | None = None
) -> None:
    """Copy every file of ``manifest`` under ``target_url`` (a local folder or a URL), checked.
    ``source``: (a filesystem, its root) to read them from instead of ``manifest.url``'s (the
    server's API, for a version held on a server)."""
    fs, root = source or filesystem(manifest.url)
    dest, droot = filesystem(target_url)
    for entry in manifest.files:
        target = f"{droot.rstrip('/')}/{entry.path}"
        if "file" in _protocols(dest):
            Path(target).parent.mkdir(parents=True, exist_ok=True)
        copy_file(fs, f"{root.rstrip('/')}/{entry.path}", entry, dest, target, what)


def fetch_tree(
    manifest: Manifest, directory: Path, what: str = "dataset", source: tuple[Any, str] | None = None
) -> None:
    """Copy every file of ``manifest`` into the local folder ``directory``, checked, all or nothing
    (`phalanx data get --dir`): into a hidden folder first (beside ``directory``, or inside it when
    it exists: the same filesystem), moved into place once every file arrived with its recorded
    bytes. An existing folder keeps what it held, the version's files added (or replacing files of
    the same path); on any failure nothing of this fetch is left, not even a folder made for it."""
    directory = directory.absolute()
    if directory.exists() and not directory.is_dir():
        raise UsageError(f"{directory}: not a folder; give a folder to copy {what}'s files into")
    _check_room(manifest, directory, what)
    base = directory if directory.is_dir() else directory.parent
    while not base.exists():  # the folders to make come with the move, not before
        base = base.parent
    partial = base / f".{directory.name or 'data'}.phalanx-get-{random_hex(8)}"
    partial.mkdir()  # the umask's mode, as the folder `mkdir` would make
    try:
        copy_tree(manifest, str(partial), what, source)
        if directory.is_dir():
            _merge(manifest, partial, directory, what)
        else:
            directory.parent.mkdir(parents=True, exist_ok=True)
            partial.rename(directory)
    finally:
        shutil.rmtree(partial, ignore_errors=True)


def _merge(manifest: Manifest, partial: Path, directory: Path, what: str) -> None:
    """Move the fetched files into the existing ``directory``: each first beside its place (a hidden
    name; copied where its folder is on another filesystem, a mount or a link under ``directory``),
    then, once every one is there, renamed over it (the same folder: nothing left to fail). Until
    then nothing of the folder changed: what was staged and the folders made for it are removed."""
    staged: list[tuple[Path, Path]] = []
    made: list[Path] = []
    try:
        for entry in manifest.files:
            target = directory / entry.path
            for folder in reversed([*target.parents][: len(Path(entry.path).parents) - 1]):
                if not folder.exists():
                    folder.mkdir()
                    made.append(folder)
            beside = target.with_name(f".{target.name}.phalanx-get-{random_hex(8)}")
            try:
                os.replace(partial / entry.path, beside)
            except OSError as exc:
                if exc.errno != errno.EXDEV:
                    raise
                shutil.copy2(partial / entry.path, beside)
            staged.append((beside, target))
    except OSError as exc:
        for beside, _ in staged:
            beside.unlink(missing_ok=True)
        for folder in reversed(made):
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise UsageError(
            f"{what}: cannot place its files in {directory} ({exc.strerror or exc}: {exc.filename});"
            " nothing in the folder was changed"
        ) from None
    for beside, target in staged:
        os.replace(beside, target)


def _check_room(manifest: Manifest, directory: Path, what: str) -> None:
    """Refused before a byte is read: a version's file whose place in an existing ``directory`` is a
    folder, or under a file (the files move in whole, or not at all); a path leaving the folder."""
    for entry in manifest.files:
        safe_path(entry.path)  # a server's manifest too: never a file outside the folder
        target = directory / entry.path
        if not directory.is_dir():
            continue
        blocked = (
            target
            if target.is_dir()
            else next(
                (p for p in target.parents if p.is_relative_to(directory) and p.exists() and not p.is_dir()),
                None,
            )
        )
        if blocked is not None:
            raise UsageError(
                f"{what}: its file {entry.path!r} cannot go into {directory}: {blocked} is "
                f"{'a folder' if blocked.is_dir() else 'a file'} there; give another --dir (nothing copied)"
            )


def _protocols(fs: Any) -> tuple[str, ...]:
    p = fs.protocol
    return (p,) if isinstance(p, str) else tuple(p)
