"""A small real disk for the disk-full tests: a tmpfs mounted on a test's folder, and a file that
fills it. ``fill`` writes only where a tmpfs of at most the size asked is mounted: should the mount
not be what the test sees (another mount namespace, a mount that silently did nothing), it would
fill the machine's own disk, and every test after it (and the next CI run) would fail with ENOSPC.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

MIB = 1 << 20


@contextlib.contextmanager
def tmpfs(folder: Path, size_mib: int) -> Iterator[Path]:
    """``folder`` (made here) with a tmpfs of ``size_mib`` MiB mounted on it, unmounted after;
    skipped where the test cannot mount one (not root, no mount)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    folder.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mib}m", "tmpfs", str(folder)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr.decode()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def fill(disk: Path, most_mib: int = 64) -> Path:
    """Write a file until ``disk`` is full; returns it (remove it to free the space). Refuses unless
    ``disk`` is a mount point of at most ``most_mib`` MiB."""
    stat = os.statvfs(disk)
    size = stat.f_blocks * stat.f_frsize
    if not os.path.ismount(disk) or size > most_mib * MIB:
        raise AssertionError(f"{disk} is not a small mounted disk ({size // MIB} MiB): not filling it")
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as fh, contextlib.suppress(OSError):
        while True:
            fh.write(b"\0" * 65536)
    with open(filler, "ab", buffering=0) as fh, contextlib.suppress(OSError):
        while True:
            fh.write(b"\0")
    return filler
