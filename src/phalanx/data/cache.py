"""The download cache: ``$PHALANX_HOME/cache/data/<digest>/``, one folder per content, shared by
every experiment on the machine.

A fetch takes an exclusive file lock on ``<digest>.lock`` (fcntl: released by the kernel if the
process dies), looks again, downloads into a temporary folder beside it, checks every file against
its recorded sha256 and renames the folder into place: two experiments starting at the same moment
fetch once, and nobody ever sees half a folder. Each use touches ``<digest>.used``; ``phalanx gc``
removes entries unused for ``CACHE_MAX_AGE`` seconds (7 days) whose lock nobody holds.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import socket
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from phalanx.errors import UsageError
from phalanx.ids import random_hex
from phalanx.store.manifest import Manifest, copy_file, filesystem

CACHE_MAX_AGE = 7 * 24 * 3600.0


def cache_root(home: Path) -> Path:
    return home / "cache" / "data"


@contextlib.contextmanager
def _locked(path: Path, blocking: bool = True) -> Iterator[bool]:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)  # releases the lock


def fetch(
    home: Path, manifest: Manifest, key: str, what: str, credentials: Mapping[str, Any] | None = None
) -> Path:
    """The local folder holding ``manifest``'s files, downloaded once per machine under ``key``
    (with ``credentials``: whose to read the source with; phalanx.data.credentials)."""
    return fetch_into(cache_root(home), manifest, key, what, credentials)


def fetch_into(
    root: Path, manifest: Manifest, key: str, what: str, credentials: Mapping[str, Any] | None = None
) -> Path:
    """``root/key`` holding ``manifest``'s files, downloaded once under the lock: the same code for
    this machine's cache and a cluster node's own (``phalanx.data.nodefetch``)."""
    final = root / key
    if not final.is_dir():
        with _locked(root / f"{key}.lock"):
            if not final.is_dir():
                tmp = root / f".tmp-{key[:16]}-{random_hex(8)}"
                try:
                    _download(manifest, tmp, what, credentials)
                    os.rename(tmp, final)
                finally:
                    shutil.rmtree(tmp, ignore_errors=True)
    (root / f"{key}.used").touch()
    return final


def _download(
    manifest: Manifest, folder: Path, what: str, credentials: Mapping[str, Any] | None = None
) -> None:
    fs, base = filesystem(manifest.url, credentials)
    local, _ = filesystem(str(folder))
    folder.mkdir(parents=True)
    try:
        for entry in manifest.files:
            target = folder / entry.path
            target.parent.mkdir(parents=True, exist_ok=True)
            copy_file(fs, f"{base.rstrip('/')}/{entry.path}", entry, local, str(target), what)
            target.chmod(0o444)  # read-only: inputs are never changed in place
    except Exception as exc:
        if not missing_credentials(exc):
            raise
        raise UsageError(
            f"{what}: no credentials to read {manifest.url} on {socket.gethostname()} ({exc}); give this"
            " machine (a cluster's nodes: each of them) AWS credentials: AWS_ACCESS_KEY_ID and"
            " AWS_SECRET_ACCESS_KEY, AWS_PROFILE, an instance role, or AWS_SHARED_CREDENTIALS_FILE naming"
            " a file it can read (the experiment file's env:)"
        ) from None


def missing_credentials(exc: BaseException) -> bool:
    """Whether ``exc`` is the S3 client's "no credentials" (none, or half of a pair, found):
    botocore's, loaded only once an s3:// URL was opened, so nothing is imported to ask."""
    errors = sys.modules.get("botocore.exceptions")
    kinds = (errors.NoCredentialsError, errors.PartialCredentialsError) if errors is not None else ()
    return isinstance(exc, kinds)


def collect(home: Path, max_age: float = CACHE_MAX_AGE, now: float | None = None) -> list[str]:
    """Remove cache entries unused for ``max_age`` seconds and leftovers of killed fetches; returns
    the keys removed. An entry whose lock is held (a fetch in progress) is left alone."""
    root = cache_root(home)
    if not root.is_dir():
        return []
    now = time.time() if now is None else now
    removed = []
    for entry in sorted(root.iterdir()):
        if entry.name.startswith(".tmp-") and now - entry.stat().st_mtime > 3600:
            shutil.rmtree(entry, ignore_errors=True)  # a fetch killed midway
            continue
        if not entry.is_dir() or entry.name.startswith("."):
            continue
        used = root / f"{entry.name}.used"
        last = used.stat().st_mtime if used.exists() else entry.stat().st_mtime
        if now - last < max_age:
            continue
        with _locked(root / f"{entry.name}.lock", blocking=False) as got:
            if not got:
                continue
            _make_writable(entry)
            shutil.rmtree(entry, ignore_errors=True)
            used.unlink(missing_ok=True)
            removed.append(entry.name)
        (root / f"{entry.name}.lock").unlink(missing_ok=True)
    return removed


def _make_writable(folder: Path) -> None:
    for path in folder.rglob("*"):
        if path.is_file():
            path.chmod(0o644)
