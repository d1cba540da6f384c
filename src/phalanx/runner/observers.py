"""The plain observer: what `phalanx run` prints to a pipe and a detached supervisor to its log."""

from __future__ import annotations

import sys
import threading
from collections.abc import Mapping
from typing import IO

from phalanx.domain import ReplicaState
from phalanx.terminal_text import for_stream


class PlainObserver:
    """Lines as `[worker-1] text` on stdout; supervisor notes on stderr (pipes, CI logs)."""

    def __init__(self, out: IO[str] | None = None) -> None:
        self._out: IO[str] | None = out or sys.stdout  # stderr under -o json: stdout holds one JSON doc
        self._shown = for_stream(self._out)  # a terminal: replicas' escape sequences shown, not obeyed
        self._lock = threading.Lock()
        self._last: dict[str, str] = {}

    def line(self, replica: str, text: str) -> None:
        """Written to the stream's buffer, not flushed: a replica printing 200,000 lines cost as
        many system calls (``flush`` does, at every poll of the supervisor and before a note)."""
        with self._lock:
            if self._out is None:
                return
            try:
                self._out.write(f"[{replica}] {self._shown(text)}\n")
            except BrokenPipeError:  # `phalanx run ... | head`: stop printing; the experiment goes on
                self._out = None

    def flush(self) -> None:
        with self._lock:
            self._flush_lines()

    def _flush_lines(self) -> None:
        if self._out is None:
            return
        try:
            self._out.flush()
        except BrokenPipeError:
            self._out = None

    def states(self, replicas: Mapping[str, ReplicaState], elapsed: float) -> None:
        with self._lock:
            self._flush_lines()  # the lines before the note, in a `2>&1` pipe too
            for name, state in replicas.items():
                if self._last.get(name) != str(state):
                    self._last[name] = str(state)
                    sys.stderr.write(f"phalanx: {name} {state} ({elapsed:.1f} s)\n")
            sys.stderr.flush()

    def message(self, text: str) -> None:
        with self._lock:
            self._flush_lines()
            sys.stderr.write(f"phalanx: {text}\n")
            sys.stderr.flush()
