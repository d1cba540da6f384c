"""An environment build's lines in the experiment's console, as they come: shown on the terminal
(the observer) and, once the experiment is recorded, spooled under the console source ``build`` and
ingested at once into the store (no supervisor's ingester runs before the replicas start), so
`phalanx logs -f`, the API, the UI and a follower of a server's experiment read them while pip works.
Exactly once, as every console line: the spool record's (stream, seq) is stored once, whoever
ingests it (this, a reader's pass, the supervisor's ingester later)."""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from phalanx import knobs
from phalanx.buildprogress import BuildProgress
from phalanx.domain import BUILD_CONSOLE
from phalanx.ingest import Ingester
from phalanx.runner.observers import PlainObserver
from phalanx.spool import ACK_SUFFIX, SpoolWriter
from phalanx.supervisor.outcome import Shielded

if TYPE_CHECKING:
    from phalanx.store.base import IngestStore
    from phalanx.supervisor.outcome import Observer

log = logging.getLogger(__name__)


class BuildConsole:
    """``observer``: the terminal (None: stderr; a closed one stops the echo, never the build);
    ``store``: the experiment's store once it is recorded as building (None: the terminal only);
    ``spool_dir``: the experiment's spool folder. Thread-safe (a Horovod build reports from its own
    ticker thread)."""

    def __init__(
        self, experiment_id: str, observer: Observer | None, store: IngestStore | None, spool_dir: Path
    ) -> None:
        # without one, stderr, as the runner's own notes without an observer
        self.observer = Shielded(observer or PlainObserver(sys.stderr))
        self.store = store
        self._lock = threading.Lock()
        self.spool: SpoolWriter | None = None
        self.ingester: Ingester | None = None
        if store is not None:
            self.spool = SpoolWriter(
                spool_dir, experiment_id=experiment_id, replica=BUILD_CONSOLE, role=BUILD_CONSOLE
            )
            self.ingester = Ingester(store, None, spool_dir, cleanup=False, claimed=True)
        self.progress = BuildProgress(self.say, every=knobs.BUILD_HEARTBEAT.value())

    def say(self, lines: list[str]) -> None:
        """``lines`` to the terminal and, as one record, to the store (never failing the build: a
        line the store cannot take now stays in the spool for the supervisor's ingester)."""
        with self._lock:
            for text in lines:
                self.observer.line(BUILD_CONSOLE, text)
            self.observer.flush()
            if self.spool is None or self.ingester is None:
                return
            try:
                self.spool.log("\n".join(lines))
            except (OSError, ValueError) as exc:  # disk full: the terminal still has them
                log.warning("build lines could not be spooled (%s)", exc)
                return
            self.ingester.run_once()  # logs its own failures; the next pass retries

    def close(self) -> None:
        """The last lines stored, the stream closed and, once all of it is in the store, removed
        (the store's copy is the one kept, as the supervisor's own streams)."""
        with self._lock:
            if self.spool is None or self.ingester is None or self.store is None:
                return
            self.spool.close()
            self.ingester.run_once()
            path = self.spool.path
            with contextlib.suppress(Exception):  # tidying only: a later ingester takes what is left
                if self.store.ingest_position(self.spool.stream)[0] >= path.stat().st_size:
                    path.unlink(missing_ok=True)
                    path.with_suffix(ACK_SUFFIX).unlink(missing_ok=True)
