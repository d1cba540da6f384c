"""Console capture at the file-descriptor level: fd 1 and 2 become pipes that a thread tees to the
original terminal and turns into LOG events. Working on the descriptors (not sys.stdout) is what
catches C extensions and every child process (subprocess, multiprocessing, torch.multiprocessing),
which inherit the pipes. Used only by a plain script's main Task; under `phalanx run` the launcher
captures (PHALANX_CAPTURED=1). Standard library only.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import sys
import threading
from collections.abc import Callable

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
