"""The artifact store: files of each experiment under ``<root>/<experiment_id>/<path>``.

Any fsspec URL works as the root: a local folder by default, an S3-compatible bucket
(``s3://bucket/prefix``, the ``phalanx[s3]`` extra; endpoint and credentials from the usual AWS
variables or profile), or any other fsspec URL (``gs://``, ``az://`` with their packages). Every path a
user or a replica names goes through ``safe_path`` first, so a name cannot escape its experiment's
folder (no ``..``, no absolute paths, no backslashes).

On an object store files move in parts of ``PART_BYTES`` with at most ``PART_CONCURRENCY`` in flight, so
a file of any size is uploaded and downloaded with bounded memory, and transient errors (timeouts,
throttling, 5xx) are retried by botocore's ``standard`` mode. A write there needs no temporary name:
an object appears whole when its upload completes, and a failed upload is aborted.
"""

from __future__ import annotations

import functools
import os
import posixpath
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from phalanx.errors import MissingExtra, NotFound, UsageError
from phalanx.ids import random_hex

_ID = re.compile(r"^[0-9a-zA-Z_-]{1,64}$")
# Beyond these a file system refuses the name (ENAMETOOLONG; 255 bytes a name, less the ".tmp-xxxxxxxx"
# a write adds) or fsspec recurses too deep: refused here (400), not failing there (500).
MAX_PATH_BYTES = 1024
MAX_NAME_BYTES = 240
MAX_DEPTH = 32
# object stores: parts of 16 MiB (S3's minimum part is 5 MiB), 4 in flight: about 64 MiB a transfer
PART_BYTES = 16 * 1024 * 1024
PART_CONCURRENCY = 4
RETRY_ATTEMPTS = 8  # botocore "standard" retries (unless AWS_MAX_ATTEMPTS says otherwise)
S3_PROTOCOLS = ("s3", "s3a")


def open_fs(url: str, credentials: Mapping[str, Any] | None = None) -> tuple[Any, str]:
    """The fsspec filesystem and root path of ``url``, with the bounded-memory and retry options of
    object stores. An ``s3://`` URL without s3fs installed is MissingExtra (exit 2, the pip command).
    ``credentials``: fsspec options naming whose credentials read it (a project's, for a server's
    run: phalanx.data.credentials), over the environment's."""
    from fsspec.core import url_to_fs  # why: `phalanx ls` imports this module: no fsspec

    protocol = url.split("://", 1)[0].lower() if "://" in url else "file"
    options: dict[str, Any] = {}
    if protocol in S3_PROTOCOLS:
        try:
            import s3fs  # why: s3fs is optional (the `s3` extra)  # noqa: F401
        except ImportError as exc:
            raise MissingExtra("s3", f"PHALANX_ARTIFACTS_URL={url.split('?')[0]!r}") from exc
        options = {**s3_options(), **(credentials or {})}
    fs, root = url_to_fs(url, **options)
    return fs, str(root)


def local_path(url: str) -> str | None:
    """The folder a local root names (a path, ``file://`` or ``local://``), as fsspec spells it
    (absolute, ``~`` expanded, no trailing slash); None for any other URL."""
    protocol, sep, rest = url.partition("://")
    if not sep:
        rest = url
    elif protocol not in ("file", "local"):
        return None
    return os.path.abspath(os.path.expanduser(rest))


def s3_options() -> dict[str, Any]:
    """s3fs options: bounded parts, and botocore's retries of transient errors. Endpoint, region and
    credentials come from AWS_ENDPOINT_URL, AWS_REGION/AWS_DEFAULT_REGION, AWS_ACCESS_KEY_ID/
    AWS_SECRET_ACCESS_KEY or AWS_PROFILE, read by botocore itself (never by Phalanx, never stored).

    fsspec hands back one cached filesystem per set of options for the life of the process, so the
    endpoint is part of the options (a changed AWS_ENDPOINT_URL gets a client for the new one), and
    listings are not cached: a long-lived server that hashes a bucket for a dataset version must see
    the objects there now, not the ones an earlier listing found."""
    retries: dict[str, Any] = {"mode": os.environ.get("AWS_RETRY_MODE", "standard")}
    if not os.environ.get("AWS_MAX_ATTEMPTS"):
        retries["max_attempts"] = RETRY_ATTEMPTS
    return {
        "default_block_size": PART_BYTES,
        "max_concurrency": PART_CONCURRENCY,
        "config_kwargs": {"retries": retries},
        "endpoint_url": os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None,
        "use_listings_cache": False,
    }


def safe_path(path: str) -> str:
    """``path`` as a normalised relative POSIX path; UsageError if it could leave its folder or is
    too long for a file system. The one sanitizer of artifact paths: the SDK's records, ingest and
    the server's file routes all go through it."""
    if not isinstance(path, str) or not path.strip():
        raise UsageError("an artifact path must be a non-empty string")
    if "\x00" in path or "\\" in path:
        raise UsageError(f"artifact path {path!r} contains a NUL or a backslash")
    if path.startswith("/") or re.match(r"^[A-Za-z]:", path) or "://" in path:
        raise UsageError(f"artifact path {path!r} is absolute; give a path relative to the experiment")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        raise UsageError(f"artifact path {path!r} contains '..'; names cannot leave their folder")
    if not parts:
        raise UsageError(f"artifact path {path!r} names no file")
    clean = "/".join(parts)
    if (
        len(clean.encode()) > MAX_PATH_BYTES
        or len(parts) > MAX_DEPTH
        or any(len(n.encode()) > MAX_NAME_BYTES for n in parts)
    ):
        raise UsageError(
            f"file path {clean[:60]!r}... is too long: at most {MAX_PATH_BYTES} bytes, {MAX_DEPTH} folders"
            f" deep, {MAX_NAME_BYTES} bytes a name"
        )
    return clean


def _check_id(experiment_id: str) -> str:
    if not _ID.match(experiment_id):
        raise UsageError(f"{experiment_id!r} is not an experiment id")
    return experiment_id


class ArtifactStore:
    """Files of experiments, on any fsspec filesystem. Writes go to a temporary name then move, so a
    reader (or a second ingester writing the same bytes) never sees half a file."""

    def __init__(self, root: str) -> None:
        self.root_url = root
        local_root = local_path(root)
        self.local = local_root is not None
        if local_root is None:
            self.fs, self.root = open_fs(root)
        else:  # fsspec is imported at the first file moved, not by every process that opens the store
            self.root = local_root
            Path(self.root).mkdir(parents=True, exist_ok=True)

    @functools.cached_property
    def fs(self) -> Any:
        """The fsspec filesystem (a local root's is opened at its first use: 0.1 CPU-s of imports)."""
        return open_fs(self.root_url)[0]

    def url(self, experiment_id: str, path: str = "") -> str:
        base = posixpath.join(self.root, _check_id(experiment_id))
        return posixpath.join(base, safe_path(path)) if path else base

    def put_bytes(self, experiment_id: str, path: str, data: bytes) -> int:
        target = self.url(experiment_id, path)
        self._mkdirs(posixpath.dirname(target))
        if not self.local:  # an object appears whole when its upload completes
            self.fs.pipe_file(target, data)
            return len(data)
        tmp = Path(f"{target}.tmp-{random_hex(8)}")  # a folder: no fsspec for every run's snapshot
        try:
            tmp.write_bytes(data)
            tmp.replace(target)
        finally:
            tmp.unlink(missing_ok=True)
        return len(data)

    def put_file(self, experiment_id: str, path: str, source: str | Path) -> int:
        """Copy a local file or folder to ``path``; returns the bytes stored."""
        source = Path(source)
        if source.is_dir():
            total = 0
            for child in sorted(source.rglob("*")):
                if child.is_file():
                    rel = child.relative_to(source).as_posix()
                    total += self.put_file(experiment_id, f"{path}/{rel}", child)
            return total
        target = self.url(experiment_id, path)
        self._mkdirs(posixpath.dirname(target))
        if not self.local:  # multipart in PART_BYTES parts; a failed upload is aborted, never seen
            self.fs.put_file(str(source), target, chunksize=PART_BYTES)
            return source.stat().st_size
        tmp = f"{target}.tmp-{random_hex(8)}"
        self.fs.put_file(str(source), tmp)
        self.fs.mv(tmp, target)
        return source.stat().st_size

    def read_bytes(self, experiment_id: str, path: str) -> bytes:
        target = self.url(experiment_id, path)
        if not self.fs.isfile(target):
            raise NotFound(f"no file {path!r} in experiment {experiment_id}")
        with self.fs.open(target, "rb") as fh:
            data: bytes = fh.read()
        return data

    def get_file(self, experiment_id: str, path: str, dest: str | Path) -> Path:
        """Copy one file to the local file ``dest`` in parts (never whole in memory); a reader of
        ``dest`` never sees half of it (written under a temporary name, then renamed)."""
        target = self.url(experiment_id, path)
        if not self.fs.isfile(target):
            raise NotFound(f"no file {path!r} in experiment {experiment_id}")
        dest = Path(dest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.part-{random_hex(8)}")
        try:
            self.fs.get_file(target, str(tmp))
            tmp.replace(dest)
        finally:
            tmp.unlink(missing_ok=True)
        return dest

    def exists(self, experiment_id: str, path: str) -> bool:
        return bool(self.fs.exists(self.url(experiment_id, path)))

    def list(self, experiment_id: str, path: str = "") -> list[str]:
        """Relative paths of the files under ``path`` (recursive)."""
        base = self.url(experiment_id)
        top = self.url(experiment_id, path) if path else base
        if self.fs.isfile(top):
            return [posixpath.relpath(top, base)]
        if not self.fs.exists(top):
            return []
        found: list[Any] = self.fs.find(top)
        return sorted(posixpath.relpath(str(p), base) for p in found)

    def download(self, experiment_id: str, path: str, dest: str | Path) -> Path:
        """Copy a file or folder to the local ``dest`` (a folder, created if needed); returns it."""
        dest = Path(dest)
        files = self.list(experiment_id, path)
        if not files:
            raise NotFound(f"no file {path!r} in experiment {experiment_id}")
        prefix = safe_path(path)
        top = posixpath.dirname(prefix)
        for rel in files:
            local = dest / (posixpath.relpath(rel, top) if top else rel)
            self.get_file(experiment_id, rel, local)
        return dest / posixpath.basename(prefix)

    def delete(self, experiment_id: str, path: str) -> None:
        """Remove one file or folder of an experiment (a checkpoint its retention policy dropped)."""
        target = self.url(experiment_id, path)
        if self.fs.exists(target):
            self.fs.rm(target, recursive=True)

    def delete_experiment(self, experiment_id: str) -> None:
        base = self.url(experiment_id)
        if self.fs.exists(base):
            self.fs.rm(base, recursive=True)

    def _mkdirs(self, folder: str) -> None:
        if self.local:
            Path(folder).mkdir(parents=True, exist_ok=True)
        else:
            self.fs.makedirs(folder, exist_ok=True)
