"""A SQLite store's files are their owner's alone (mode 0600; SQLite gives its -wal and -shm the
database file's mode): they hold every project's records, the secrets' ciphertexts and the users'
token hashes, which no other account of the machine may read (docs/security.md). Standard library
only: the lean reader (`phalanx ls`, `phalanx logs`) tightens an older store too."""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

OWNER_ONLY = 0o600  # a SQLite database's mode, and so its -wal's and -shm's
SQLITE_SIDE_FILES = ("-wal", "-shm")


def create_private(database: Path) -> None:
    """Make a missing database file, empty (an empty file is an empty database), mode exactly 0600
    whatever the umask, before SQLite opens it. Nothing when it exists, or when it may not be
    made here (SQLite's error then says why); a symbolic link in its place is never followed."""
    try:
        fd = os.open(database, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, OWNER_ONLY)
    except OSError:
        return
    with contextlib.suppress(OSError):
        os.fchmod(fd, OWNER_ONLY)
    os.close(fd)


def tighten(database: Path) -> None:
    """Take the group's and others' bits from the database file and its -wal and -shm (an older
    version made them 0644) where this process's user owns them: regular files only (``lstat``: a
    symbolic link in their place is left alone). Never fails.

    By path, never through a descriptor of its own: closing any descriptor of a SQLite file drops
    every POSIX lock this process holds on it, those of its open connections too (sqlite.org,
    "How To Corrupt": a store opened twice in one process would be corrupted)."""
    for path in (database, *(Path(f"{database}{side}") for side in SQLITE_SIDE_FILES)):
        with contextlib.suppress(OSError, NotImplementedError):
            info = os.lstat(path)
            if stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid() and info.st_mode & 0o077:
                os.chmod(path, stat.S_IMODE(info.st_mode) & 0o700)
