"""A snapshot archive is read from the artifact store, where anyone with the experiment's token (a
replica's included) can replace it: a few KiB of gzip that unpack to hundreds of MiB must not be
held in the server's memory when someone opens the diff of two experiments."""

from __future__ import annotations

import io
import tarfile

from phalanx import repro


def _bomb(file_bytes: int, files: int = 1) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=9) as tar:
        for i in range(files):
            info = tarfile.TarInfo(f"big{i}.bin")
            info.size = file_bytes
            tar.addfile(info, _Zeros(file_bytes))
        ok = tarfile.TarInfo("train.py")
        ok.size = 5
        tar.addfile(ok, io.BytesIO(b"print"))
    return buf.getvalue()


class _Zeros(io.RawIOBase):
    """``n`` zero bytes, made as they are read (the bomb is built without holding it)."""

    def __init__(self, n: int) -> None:
        self.left = n

    def readable(self) -> bool:
        return True

    def readinto(self, b: bytearray) -> int:  # type: ignore[override]
        n = min(len(b), self.left)
        b[:n] = bytes(n)
        self.left -= n
        return n


def test_a_snapshot_file_bigger_than_a_snapshot_can_hold_is_left_out() -> None:
    data = _bomb(repro.SNAPSHOT_MAX_FILE + 1)
    assert len(data) < 100_000
    files = repro.source_files(data)
    assert files == {"train.py": b"print"}


def test_reading_a_snapshot_stops_at_the_snapshot_size_limit() -> None:
    per_file = repro.SNAPSHOT_MAX_FILE
    data = _bomb(per_file, files=repro.SNAPSHOT_MAX_BYTES // per_file + 3)
    files = repro.source_files(data)
    assert sum(len(v) for v in files.values()) <= repro.SNAPSHOT_MAX_BYTES
