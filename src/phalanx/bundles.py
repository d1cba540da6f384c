"""Code bundles a client sends to a server: the submitter's folder as a content-addressed .tar.gz.

The same folder walk, skips and byte-for-byte reproducible packing as the Kubernetes code bundle
(``backends.kube_code``): VCS folders, venvs, caches, data folders, files over 16 MiB and what the
folder's .gitignore files and a .phalanxignore exclude stay behind (``codeignore``), so the same
files always give the same bytes and the same sha256. The server keeps each bundle once, by that
hash (``BundleStore``), and unpacks it into a working folder per experiment (``unpack``), refusing
members that would land outside it or unpack past the cap (a small gzip can inflate to gigabytes).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import tarfile
from collections.abc import Iterator
from pathlib import Path

from phalanx.backends.kube_code import BUNDLE_CAP, _plain, _source_files
from phalanx.errors import UsageError

SHA256_HEX = 64
# entries of a bundle at most (a source folder has far fewer): each is kept in memory while it is
# read, so a small gzip of millions of empty headers must not be read to its end
MAX_MEMBERS = 50_000
BLOCK = 512  # a tar header's bytes


def pack(folder: Path, cap: int = BUNDLE_CAP) -> bytes:
    """``folder``'s source files as a reproducible .tar.gz; UsageError naming the largest files
    when what is left after the skips (``codeignore``: .gitignore and .phalanxignore too) is over
    ``cap`` bytes."""
    files = list(_source_files(folder))
    total = sum(f.stat().st_size for f in files)
    if total > cap:
        biggest = sorted(files, key=lambda f: f.stat().st_size, reverse=True)[:3]
        names = ", ".join(f"{f.relative_to(folder)} ({f.stat().st_size >> 20} MiB)" for f in biggest)
        raise UsageError(
            f"{folder}: {total >> 20} MiB of files to send to the server (the cap is {cap >> 20} MiB; "
            f"largest: {names}); move data out of the experiment's folder (or into a data/ folder, "
            "which is not sent) and read it from storage the server can reach"
        )
    buf = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=6, mtime=0) as gz,
        tarfile.open(fileobj=gz, mode="w") as tar,
    ):
        for f in files:
            tar.add(f, arcname=f.relative_to(folder).as_posix(), recursive=False, filter=_plain)
    return buf.getvalue()


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def check(data: bytes, cap: int = BUNDLE_CAP) -> int:
    """What ``unpack`` would refuse, without writing anything (a submit is checked before it is
    answered); returns the number of files. UsageError as ``unpack``."""
    return sum(1 for _ in _members(data, Path("/bundle"), cap))


def unpack(data: bytes, dest: Path, cap: int = BUNDLE_CAP) -> int:
    """Unpack a bundle into ``dest`` (regular files and folders only, all below it); returns the
    number of files. UsageError for an archive that is not a .tar.gz, or unpacks past ``cap``."""
    dest.mkdir(parents=True, exist_ok=True)
    count = 0
    for target, content, executable in _members(data, dest.resolve(), cap):
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "wb") as out:
            out.write(content)
        os.chmod(target, 0o755 if executable else 0o644)
        count += 1
    return count


def _members(data: bytes, root: Path, cap: int) -> Iterator[tuple[Path, bytes, bool]]:
    """Each regular file of the bundle: where it lands below ``root``, its bytes, whether it is
    executable; UsageError for a member outside ``root``, past ``cap``, or an unreadable archive."""
    total = 0
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            for count, member in enumerate(tar, 1):
                total += BLOCK  # every member's header counts, a folder's or a link's too
                if count > MAX_MEMBERS:
                    raise UsageError(f"the code bundle holds more than {MAX_MEMBERS} entries")
                if not member.isfile():
                    if total > cap:
                        raise UsageError(f"the code bundle unpacks to more than the cap of {cap >> 20} MiB")
                    continue
                total += member.size
                if total > cap:
                    raise UsageError(f"the code bundle unpacks to more than the cap of {cap >> 20} MiB")
                target = Path(os.path.normpath(root / member.name))
                if not target.is_relative_to(root) or target == root:
                    raise UsageError(f"the code bundle holds {member.name!r}, outside its folder")
                src = tar.extractfile(member)
                if src is None:
                    continue
                yield target, src.read(), bool(member.mode & 0o100)
    except (tarfile.TarError, EOFError, OSError, gzip.BadGzipFile) as exc:
        raise UsageError(f"the code bundle is not a readable .tar.gz ({exc})") from None


class BundleStore:
    """Bundles kept once each, by content: ``<root>/<sha256>.tar.gz``."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, sha256: str) -> Path:
        return self.root / f"{sha256}.tar.gz"

    def put(self, data: bytes) -> str:
        """Keep ``data`` (atomically: a reader never sees half a bundle); returns its sha256."""
        sha = digest(data)
        path = self.path(sha)
        if not path.exists():
            self.root.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f"{sha}.{os.getpid()}.{id(data)}.tmp")
            try:
                tmp.write_bytes(data)
                os.replace(tmp, path)
            except BaseException:  # a full disk: no half bundle left behind
                tmp.unlink(missing_ok=True)
                raise
        return sha
