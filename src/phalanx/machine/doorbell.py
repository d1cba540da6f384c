"""Waking the experiments that wait in this machine's queue the moment a holder leaves the ledger.

Why: a waiter looked at the ledger every 50 ms, so a freed machine sat idle for 25 ms on average and
up to a whole look (more under load) before the next experiment took it. Each waiter now sleeps on
its own named pipe in ``<ledger>.bells/`` and ``ring`` (called by ``Ledger.release``) writes a byte
to every pipe there. The look stays as the fallback: a waiter whose pipe cannot be made (another
user's shared ledger folder, a file system without FIFOs) just polls as before.

Standard library only (the supervisor imports it before anything else starts).
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import stat
from pathlib import Path


def bells_folder(ledger_path: Path) -> Path:
    return ledger_path.with_name(ledger_path.name + ".bells")


class Bell:
    """One waiter's pipe. It keeps a write end open itself, so the read end never reports EOF
    (which would make every wait return at once) when no ringer has it open."""

    def __init__(self, folder: Path, name: str) -> None:
        self.path = folder / name
        self._fds: tuple[int, int] | None = None
        try:
            folder.mkdir(parents=True, exist_ok=True)
            # made under a temporary name and opened before it is moved into place: a ringer that
            # finds a pipe with no reader takes it for a dead waiter's and removes it
            tmp = folder / f".{name}.{os.getpid()}.tmp"
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
            os.mkfifo(tmp, 0o600)
            os.chmod(tmp, 0o622)  # other users sharing the ledger may ring it (never read it)
            read = os.open(tmp, os.O_RDONLY | os.O_NONBLOCK)
            write = os.open(tmp, os.O_WRONLY | os.O_NONBLOCK)
            os.replace(tmp, self.path)
            self._fds = (read, write)
        except OSError:
            self._fds = None  # the waiter polls instead

    def wait(self, timeout: float) -> bool:
        """Sleep until rung or ``timeout`` seconds passed; True if rung."""
        if self._fds is None:
            select.select([], [], [], timeout)
            return False
        read = self._fds[0]
        ready, _, _ = select.select([read], [], [], timeout)
        if not ready:
            return False
        with contextlib.suppress(BlockingIOError):
            while os.read(read, 4096):
                pass
        return True

    def close(self) -> None:
        if self._fds is None:
            return
        for fd in self._fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds = None
        with contextlib.suppress(OSError):
            self.path.unlink()

    def __enter__(self) -> Bell:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def ring(folder: Path) -> int:
    """Wake every waiter with a pipe in ``folder``; returns how many were rung. A pipe nobody
    reads (its waiter was killed) is removed."""
    try:
        names = os.listdir(folder)
    except OSError:
        return 0
    rung = 0
    for name in names:
        if name.startswith("."):
            continue
        path = folder / name
        try:
            if not stat.S_ISFIFO(os.lstat(path).st_mode):
                continue
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # no reader: a waiter that is gone
                with contextlib.suppress(OSError):
                    path.unlink()
            continue
        try:
            os.write(fd, b"!")
            rung += 1
        except BlockingIOError:  # already full of rings: it will wake anyway
            rung += 1
        except OSError:
            pass
        finally:
            os.close(fd)
    return rung
