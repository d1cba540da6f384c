"""Console capture at the file-descriptor level: fd 1 and 2 become pipes that a thread tees to the
original terminal and turns into LOG events. Working on the descriptors (not sys.stdout) is what
catches C extensions and every child process (subprocess, multiprocessing, torch.multiprocessing),
which inherit the pipes. Used only by a plain script's main Task; under `phalanx run` the launcher
captures (PHALANX_CAPTURED=1). Standard library only.
"""

from __future__ import annotations

import codecs
import contextlib
import fcntl
import os
import select
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

Sink = Callable[[str, list[str]], None]  # (stream name, complete lines)


class _Tee:
    def __init__(self, fd: int, name: str, sink: Sink) -> None:
        self.fd, self.name, self.sink = fd, name, sink
        self.saved = os.dup(fd)
        read_end, write_end = os.pipe()
        os.dup2(write_end, fd)
        os.close(write_end)
        self.read_end = read_end
        self.thread = threading.Thread(target=self._run, name=f"phalanx-console-{name}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        partial = ""
        while True:
            try:
                data = os.read(self.read_end, 65536)
            except OSError:
                data = b""
            if not data:
                break
            with contextlib.suppress(OSError):
                _write_all(self.saved, data)
            text = partial + decoder.decode(data)
            lines = text.split("\n")
            partial = lines.pop()
            if lines:
                self.sink(self.name, lines)
        rest = partial + decoder.decode(b"", final=True)
        if rest:
            self.sink(self.name, [rest])
        os.close(self.read_end)

    def stop(self, timeout: float) -> None:
        os.dup2(self.saved, self.fd)  # our end of the pipe closes; EOF once children let go too
        self.thread.join(timeout)
        os.close(self.saved)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class ConsoleCapture:
    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        self._tees: list[_Tee] = []

    def start(self) -> None:
        _flush_std()
        self._tees = [_Tee(1, "stdout", self.sink), _Tee(2, "stderr", self.sink)]

    def stop(self, timeout: float = 2.0) -> None:
        """Give the descriptors back and wait (bounded) for the last lines."""
        _flush_std()
        tees, self._tees = self._tees, []
        for tee in tees:
            tee.stop(timeout)

    @property
    def active(self) -> bool:
        return bool(self._tees)


def _flush_std() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            if stream is not None:
                stream.flush()


class ExternalCapture:
    """Console capture read by another process (the script's detached ingester), so the lines a
    script prints just before it is SIGKILLed, OOM-killed or segfaults still reach the terminal and
    the store: they wait in the pipe for a reader that did not die with the script. (The in-process
    ``ConsoleCapture`` thread dies with its process, and what it had not read yet is lost.)

    ``reader_fds()`` are passed to the reader process (pipe read ends, then the terminal's stdout
    and stderr); ``attach()`` then points fd 1 and 2 at the pipes, ``stop()`` gives them back."""

    def __init__(self, lock_path: Path | None = None) -> None:
        _flush_std()
        self._lock_path = lock_path  # the relay holds it while a chunk it read is not yet written
        self._out_r, self._out_w = os.pipe()
        self._err_r, self._err_w = os.pipe()
        self._saved = (os.dup(1), os.dup(2))
        self._attached = False

    def reader_fds(self) -> tuple[int, int, int, int]:
        return self._out_r, self._err_r, self._saved[0], self._saved[1]

    def attach(self) -> None:
        _flush_std()
        os.dup2(self._out_w, 1)
        os.dup2(self._err_w, 2)
        for fd in (self._out_w, self._err_w):
            os.close(fd)
        # the read ends stay open here too (not inherited: os.pipe fds are not): should the reader
        # die, a print gets no EPIPE, and ``take_back`` recovers what it had not read
        self._attached = True

    def take_back(self, sink: Sink) -> None:
        """The reader died: fd 1 and 2 back to the terminal, and what it left in the pipes to the
        terminal and ``sink``."""
        self.stop()
        for fd in (self._out_r, self._err_r):
            os.set_blocking(fd, False)
        quiet = 0
        while quiet < 3:  # a write blocked on the full pipe completes once we read: wait for it
            got = False
            for fd, name in ((self._out_r, "stdout"), (self._err_r, "stderr")):
                data = b""
                with contextlib.suppress(OSError):
                    while chunk := os.read(fd, 65536):
                        data += chunk
                if data:
                    got = True
                    with contextlib.suppress(OSError):
                        _write_all(1 if name == "stdout" else 2, data)
                    sink(name, data.decode(errors="replace").splitlines())
            quiet = 0 if got else quiet + 1
            time.sleep(0.02)

    def abandon(self) -> None:
        """No reader could be started: close everything, the console stays as it was."""
        for fd in (self._out_w, self._err_w, self._out_r, self._err_r, *self._saved):
            with contextlib.suppress(OSError):
                os.close(fd)

    def stop(self, timeout: float = 2.0) -> None:
        if not self._attached:
            return
        self._attached = False
        _flush_std()
        os.dup2(self._saved[0], 1)  # our write ends close: the reader gets EOF once children let go
        os.dup2(self._saved[1], 2)
        for fd in self._saved:
            with contextlib.suppress(OSError):
                os.close(fd)

    def wait_relayed(self, reader_alive: Callable[[], bool], stall: float = 30.0) -> None:
        """Wait until the reader has taken everything from the pipes. Else the script exits before
        its last lines reach the terminal: a shell prompt comes back first, and
        `python train.py > out.log; tail out.log` misses the end. Call after ``stop()``.

        No fixed bound: on a loaded machine the reader may still be starting when a short script
        ends. The wait ends when the pipes are empty, when the reader is gone, or when it has made
        no progress for ``stall`` seconds (its terminal blocked: a `| less` nobody scrolls)."""
        import termios  # why: `from phalanx import Task` stays light

        deadline = time.monotonic() + stall
        last_left = -1
        try:  # holding the relay's lock, an empty pipe means every byte reached the terminal
            lock = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o600) if self._lock_path else None
        except OSError:
            lock = None
        try:
            while time.monotonic() < deadline and reader_alive():
                if lock is not None:
                    try:
                        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BlockingIOError:  # a chunk is between the pipe and the terminal
                        time.sleep(0.002)
                        continue
                try:
                    left = 0
                    for fd in (self._out_r, self._err_r):
                        buf = bytearray(4)
                        try:
                            fcntl.ioctl(fd, termios.FIONREAD, buf)
                        except OSError:
                            return
                        left += int.from_bytes(buf, sys.byteorder)
                finally:
                    if lock is not None:
                        fcntl.flock(lock, fcntl.LOCK_UN)
                if not left:
                    return
                if left != last_left:  # the reader took some (or the script's children wrote)
                    last_left, deadline = left, time.monotonic() + stall
                time.sleep(0.005)
        finally:
            if lock is not None:
                os.close(lock)
            if self._lock_path is not None:  # the relay keeps its own descriptor of it
                with contextlib.suppress(OSError):
                    self._lock_path.unlink()

    def close_pipes(self) -> None:
        for fd in (self._out_r, self._err_r):
            with contextlib.suppress(OSError):
                os.close(fd)

    @property
    def active(self) -> bool:
        return self._attached


def relay_lock_path(spool: Path, script_pid: int) -> Path:
    """The lock a relay holds from reading a chunk until it is on the terminal (wait_relayed)."""
    return spool / f"relay-{script_pid}.lock"


def relay(read_fd: int, terminal_fd: int, name: str, sink: Sink, lock_path: Path | None = None) -> None:
    """In the reader process: copy ``read_fd`` to ``terminal_fd`` and its complete lines to ``sink``
    until EOF (every writer closed: the script and its children ended, however they ended). With
    ``lock_path``, each chunk is read and written under its lock, so the script, holding the lock
    and seeing an empty pipe, knows its last line is on the terminal (not in our hands)."""
    try:
        lock = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600) if lock_path else None
    except OSError:
        lock = None
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    partial = ""
    while True:
        if lock is not None:  # wait for data unlocked, then take the lock before reading it
            with contextlib.suppress(InterruptedError, OSError):
                select.select([read_fd], [], [])
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            data = os.read(read_fd, 65536)
        except InterruptedError:
            data = None
        except OSError:
            data = b""
        if data:
            with contextlib.suppress(OSError):  # the terminal went away: the store still gets them
                _write_all(terminal_fd, data)
        if lock is not None:
            fcntl.flock(lock, fcntl.LOCK_UN)
        if data is None:
            continue
        if not data:
            break
        text = partial + decoder.decode(data)
        lines = text.split("\n")
        partial = lines.pop()
        if lines:
            sink(name, lines)
    rest = partial + decoder.decode(b"", final=True)
    if rest:
        sink(name, [rest])
    os.close(read_fd)
    if lock is not None:
        os.close(lock)
    with contextlib.suppress(OSError):
        os.close(terminal_fd)  # a `script | tee` pipeline ends when the script does, not after us
