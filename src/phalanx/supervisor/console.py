"""Every replica's console while the experiment runs: what the replicas print (a ``LogTail`` thread
each) and the supervisor's own notes, to the observer (the terminal) and to the spool (the store's
copy), and the launch's params as tracked params."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from phalanx.domain import Replica
from phalanx.supervisor.tails import LogTail, join_tails

if TYPE_CHECKING:
    from phalanx.spool import SpoolWriter
    from phalanx.supervisor.liveness import Liveness
    from phalanx.supervisor.outcome import Observer


class Console:
    """``spool``: the supervisor's own stream of the experiment's spool; ``observer``: the terminal
    (its failures are its own: see ``outcome.Shielded``); ``liveness``: told of every line (output
    is progress), when the hang check is on. ``lost``: console lines the spool could not take (the
    outcome says how many)."""

    def __init__(
        self,
        spool: SpoolWriter,
        observer: Observer,
        replicas: Mapping[str, Replica],
        liveness: Liveness | None = None,
    ) -> None:
        self.spool = spool
        self.observer = observer
        self.replicas = replicas
        self.liveness = liveness
        self.tails: dict[str, LogTail] = {}
        self.lost = 0

    def follow(self, logs: Callable[[str], Iterator[str]]) -> None:
        """Tail each replica's log (``logs(name)``: its lines, followed to its end) of a new group."""
        self.tails = {
            name: LogTail(logs(name), replica, self.show, self.spool_lines)
            for name, replica in self.replicas.items()
        }

    def flush(self) -> None:
        """What the replicas printed since the last poll reaches the spool and the observer's reader."""
        for tail in list(self.tails.values()):
            tail.flush()
        self.observer.flush()  # and the terminal (or the detached supervisor's log)

    def join(self) -> None:
        """Wait for every tail to reach the end of its replica's log, once the replicas have ended
        (an engine may follow a replica's log until the whole job ends, as Slurm's does): their
        last lines are shown before their end is. At once for a tail that did already."""
        join_tails(self.tails.values())

    def last_lines(self, replica: str) -> list[str]:
        """The last non-blank lines the replica printed (a failure's reason quotes them), once its
        reader has reached the end of its log (the replica has ended): waited for while it makes
        progress, not for a fixed few seconds that a loaded machine exceeds (the reason then
        quoted lines from before the traceback)."""
        tail = self.tails.get(replica)
        if tail is None:
            return []
        join_tails([tail])
        return [line for line in tail.last if line.strip()]

    def line(self, replica: Replica, text: str) -> None:
        """A supervisor note in a replica's console: spooled (after what the replica printed
        before it), then shown; one console line per line of it (a restart's reason quotes the
        replica's last lines: as one stored line they printed without the replica's name)."""
        tail = self.tails.get(replica.name)
        if tail is not None:
            tail.flush()
        lines = text.rstrip("\n").split("\n")
        self.spool_lines(replica, lines)
        for each in lines:
            self.show(replica, each)

    def emit_all(self, text: str) -> None:
        """A supervisor note in the console of every replica (restarts, servers stopped)."""
        for replica in self.replicas.values():
            self.line(replica, text)

    def show(self, replica: Replica, text: str) -> None:
        if self.liveness is not None:
            self.liveness.output(replica.name)
        self.observer.line(replica.name, text)

    def spool_lines(self, replica: Replica, lines: list[str], stream: str = "stdout") -> None:
        # ValueError: the writer closed under a late line at shutdown (a stuck reader given up on);
        # OSError: the disk is full. The lines still reach the terminal; the outcome counts them.
        try:
            self.spool.write(
                "log",
                {"stream": stream, "lines": lines},
                replica=replica.name,
                role=str(replica.role),
                index=replica.index,
                rank=replica.rank,
            )
        except (ValueError, OSError):
            self.lost += len(lines)

    def record_params(self, section: str, params: Mapping[str, Any]) -> None:
        """The declared params (the file's, after `--param`; a trial's sampled values included) as
        tracked params in ``section`` (a PARAM event of the first replica, rank 0 where there is one)."""
        first = min(self.replicas.values(), key=lambda r: (r.rank is None, r.rank or 0))
        values = {
            k: v if isinstance(v, (str, int, float, bool)) or v is None else json.dumps(v)
            for k, v in params.items()
        }
        with contextlib.suppress(ValueError, OSError):
            self.spool.write(
                "param",
                {"section": section, "values": values},
                replica=first.name,
                role=str(first.role),
                index=first.index,
                rank=first.rank,
            )
