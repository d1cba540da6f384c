"""The model version a server answers with, and the thread that follows its alias.

A ``Loaded`` model is immutable (version, ONNX Runtime session, signature). The follower polls the
registry every ``poll_seconds``; when ``NAME@alias`` names another version it loads that version
fully (bytes checked against their sha256, a session built) and only then swaps one reference. A
batch takes the reference once and runs to its end on that session, so every request is answered
by exactly one version, and none waits or fails while a new version loads: the old session lives
until the last batch holding it ends. Within ``poll_seconds`` plus one load of a move, new batches
run on the new version (docs/models.md states the bound).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from phalanx.registry.onnx_load import open_session
from phalanx.store.registry_records import ModelRef, ModelVersion

log = logging.getLogger(__name__)


def providers() -> list[str]:
    """CUDA first where onnxruntime-gpu sees a GPU, then the CPU (always present)."""
    import onnxruntime as ort  # why: onnxruntime is optional (the `serve` extra)

    available = ort.get_available_providers()
    return [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider") if p in available]


@dataclass(frozen=True)
class Loaded:
    name: str
    version: int
    session: Any  # onnxruntime.InferenceSession
    signature: dict[str, Any]
    provider: str


def load(version: ModelVersion, data: bytes, intra_threads: int = 0) -> Loaded:
    import onnxruntime as ort  # why: onnxruntime is optional (the `serve` extra)

    options = ort.SessionOptions()
    if intra_threads:
        options.intra_op_num_threads = intra_threads
    # a version registered before the registry refused external data is refused here too
    session = open_session(data, options, providers())
    return Loaded(version.name, version.version, session, version.signature, session.get_providers()[0])


class Follower:
    """Holds the served ``Loaded`` model; ``start()`` follows ``ref``'s alias in a daemon thread.

    ``resolve`` maps the reference to a version and ``read`` a version to its bytes (the registry's
    ``resolve`` and ``read_bytes``; injectable so tests and the bench need no store)."""

    def __init__(
        self,
        ref: ModelRef,
        resolve: Callable[[ModelRef], ModelVersion],
        read: Callable[[ModelVersion], bytes],
        *,
        poll_seconds: float = 0.5,
        intra_threads: int = 0,
    ) -> None:
        self.ref = ref
        self._resolve = resolve
        self._read = read
        self.poll_seconds = poll_seconds
        self.intra_threads = intra_threads
        first = resolve(ref)
        self.current: Loaded = load(first, read(first), intra_threads)
        self.reloads = 0
        self.last_error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self.ref.alias is None or self._thread is not None:
            return  # a fixed version (NAME@3) never changes; NAME alone means the latest at start
        self._thread = threading.Thread(target=self._follow, name="phalanx-serve-follow", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def check_once(self) -> bool:
        """Load the version the alias names now if it is not the served one; True if it swapped."""
        found = self._resolve(self.ref)
        if found.version == self.current.version:
            return False
        loaded = load(found, self._read(found), self.intra_threads)
        previous = self.current.version
        self.current = loaded  # one reference swap: batches that hold the old one finish on it
        self.reloads += 1
        log.info("%s moved: serving version %d (was %d)", self.ref, loaded.version, previous)
        return True

    def _follow(self) -> None:
        while not self._stop.wait(self.poll_seconds):
            try:
                self.check_once()
                self.last_error = None
            except Exception as exc:  # the store down, a bad file: keep serving what is loaded
                if str(exc) != self.last_error:
                    log.warning(
                        "cannot follow %s (still serving version %d): %s", self.ref, self.current.version, exc
                    )
                self.last_error = str(exc)
