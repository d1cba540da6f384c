"""Following work on a server: an experiment's replicas' console (read by offset) and its status, or
a group's trials, until it ends, through a server that restarts meanwhile.

A follower (`phalanx run --server ... ` in the foreground, `phalanx group run` there,
``RemoteRun.wait_for_completion``) outlives a server that cannot be reached or answers 502/503/504
for up to ``FOLLOW_RETRY_SECONDS``: it says so in one line, keeps trying, says when the server
answers again and goes on from the offsets it had, so no line is printed twice or missed. The
experiment itself never depended on the follower (it runs under the server), so a restart of the
server is no reason for a follower to fail.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import IO, Any, TypeVar

from phalanx.apiclient import Client, Unavailable, quote
from phalanx.domain import console_sources
from phalanx.terminal_text import for_stream

FOLLOW_RETRY_SECONDS = 300.0  # longer than a server restart with its database (docs/server-submit.md)
POLL_SECONDS = 0.5
DONE = ("succeeded", "failed", "stopped")

T = TypeVar("T")


class Patience:
    """Reads that wait through an unavailable server for ``seconds``, saying so once per outage."""

    def __init__(
        self, what: str, say: Callable[[str], object] | None, seconds: float = FOLLOW_RETRY_SECONDS
    ) -> None:
        self.what = what
        self.say = say or (lambda _line: None)
        self.seconds = seconds
        self._down_since: float | None = None

    def attempt(self, read: Callable[[], T]) -> T | None:
        """``read()``, or None while the server is unavailable (Unavailable once it has been for
        longer than ``seconds``)."""
        try:
            value = read()
        except Unavailable as exc:
            now = time.monotonic()
            if self._down_since is None:
                self._down_since = now
                self.say(
                    f"phalanx: {exc.message}; still following {self.what}, for up to {self.seconds:.0f} s\n"
                )
            elif now - self._down_since > self.seconds:
                raise exc.again(
                    f"{exc.message}; stopped following {self.what} after {self.seconds:.0f} s (it runs on"
                    " the server regardless: `phalanx get` shows how it ends)"
                ) from None
            return None
        if self._down_since is not None:
            self._down_since = None
            self.say(f"phalanx: the server answers again; following {self.what}\n")
        return value


class ExperimentFollower:
    """One experiment's status and new console lines, look by look."""

    def __init__(self, client: Client, experiment_id: str, say: Callable[[str], object] | None) -> None:
        self.client = client
        self.experiment_id = experiment_id
        self.patience = Patience(f"experiment {experiment_id}", say)
        self.offsets: dict[str, int] = {}

    def look(self, out: IO[str] | None) -> dict[str, Any] | None:
        """The experiment's details, after writing each replica's new console lines to ``out`` (when
        given; the details are read first, so no line of an ended experiment is missed); None while
        the server is unavailable."""
        return self.patience.attempt(lambda: self._look(out))

    def _look(self, out: IO[str] | None) -> dict[str, Any]:
        details: dict[str, Any] = self.client.get(f"/experiments/{quote(self.experiment_id)}")
        if out is not None:
            for name in console_sources([r["name"] for r in details.get("replicas") or []]):
                self._print_new(name, out)
        return details

    def _print_new(self, replica: str, out: IO[str]) -> None:
        shown = for_stream(out)  # a terminal gets no escape sequence but colours from a replica
        while True:
            page = self.client.get(
                f"/experiments/{quote(self.experiment_id)}/logs",
                replica=replica,
                offset=self.offsets.get(replica, 0),
                limit=1000,
            )
            for line in page["lines"]:
                out.write(f"[{line['replica']}] {shown(line['text'])}\n")
            out.flush()
            self.offsets[replica] = int(page["next_offset"])
            if len(page["lines"]) < 1000:
                return
