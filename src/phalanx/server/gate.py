"""Chart reads take turns at the door, and step aside for a read a person waits on, so the list and
the other small requests never queue behind them.

Why: the server is one process, and every request it works on holds the interpreter in turn — the
sign-in check, the access policy's experiment lookup, the chart's summary read, its encoding. With
twenty browsers pulling a big chart in a loop, a list request shared the process with twenty chart
requests in flight and waited for all of them (p99 0.6-1.8 s on this 2-core machine). Here a chart
request waits for one of ``slots`` turns *before* any of that work starts (waiting costs nothing:
an await on the event loop), so at most ``slots`` chart requests are being worked on at once,
whatever the number of clients, and a small request competes with those few only.

Those few were still enough to keep the one event loop busy (a chart answered from the cache of
finished runs is quick, so twenty clients send the next one at once): the list's every hop between
the loop and its thread waited behind them (2.5-3.9x its idle p99). So a chart read that got its
turn also lets any other GET that is waiting for its answer go first, for at most ``yield_s``: a
stream of lists (or a slow one) delays a chart by that much at most. A GET counts until its answer
starts, so a live console (server-sent events, which never end) does not hold charts back; writes
(a replica's records) and a running service's proxied pages (they answer when the service does)
do not count.

Only the chart points of one title (``GET /api/v1/experiments/{id}/metrics/{title}``) take turns:
what the UI asks for in bulk and what costs the most per request. Everything else goes straight in.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import weakref
from dataclasses import dataclass, field

from starlette.types import ASGIApp, Message, Receive, Scope, Send

CHART_PATH = re.compile(r"^/api/v1/experiments/[^/]+/metrics/.+")
PROXIED = "/services/"  # a service's pages, proxied: they answer when the service does


def is_chart_read(method: str, path: str) -> bool:
    """A request for one title's chart points (the requests that take turns)."""
    return method == "GET" and CHART_PATH.match(path) is not None


YIELD_S = 0.2  # the most a chart read that has its turn waits for other reads to be answered


@dataclass
class _Door:
    """The gate's state on one event loop (asyncio's primitives belong to one loop)."""

    turns: asyncio.Semaphore
    reads: int = 0  # other GETs whose answer has not started yet
    clear: asyncio.Event = field(default_factory=asyncio.Event)  # set while ``reads`` is 0

    def __post_init__(self) -> None:
        self.clear.set()

    def read_started(self) -> None:
        self.reads += 1
        self.clear.clear()

    def read_answered(self) -> None:
        self.reads -= 1
        if not self.reads:
            self.clear.set()


class ChartGate:
    """ASGI middleware: at most ``slots`` chart reads at once, the rest waiting on the event loop in
    the order they came (asyncio's semaphore is fair); one with its turn first lets other reads that
    are waiting for their answer go, for at most ``yield_s``."""

    def __init__(self, app: ASGIApp, slots: int = 2, yield_s: float = YIELD_S) -> None:
        self.app = app
        self.slots = slots
        self.yield_s = yield_s
        # one door per loop (a test may serve an app from several)
        self._doors: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Door] = weakref.WeakKeyDictionary()

    def _door(self) -> _Door:
        loop = asyncio.get_running_loop()
        door = self._doors.get(loop)
        if door is None:
            door = self._doors[loop] = _Door(asyncio.Semaphore(self.slots))
        return door

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] not in ("GET", "HEAD")
            or scope["path"].startswith(PROXIED)
        ):
            await self.app(scope, receive, send)
        elif is_chart_read(scope["method"], scope["path"]):
            door = self._door()
            async with door.turns:
                if door.reads:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(door.clear.wait(), self.yield_s)
                await self.app(scope, receive, send)
        else:
            await self._read(self._door(), scope, receive, send)

    async def _read(self, door: _Door, scope: Scope, receive: Receive, send: Send) -> None:
        """Another GET: chart reads wait for it until its answer starts (or ``yield_s`` passed)."""
        waiting = True
        door.read_started()

        async def answering(message: Message) -> None:
            nonlocal waiting
            if waiting and message["type"] == "http.response.start":
                waiting = False
                door.read_answered()
            await send(message)

        try:
            await self.app(scope, receive, answering)
        finally:
            if waiting:
                door.read_answered()
