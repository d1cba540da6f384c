"""Chart reads take turns at the door, so the list and the other small requests never queue behind them.

Why: the server is one process, and every request it works on holds the interpreter in turn — the
sign-in check, the access policy's experiment lookup, the chart's summary read, its encoding. With
twenty browsers pulling a big chart in a loop, a list request shared the process with twenty chart
requests in flight and waited for all of them (p99 0.6-1.8 s on this 2-core machine). Here a chart
request waits for one of ``slots`` turns *before* any of that work starts (waiting costs nothing:
an await on the event loop), so at most ``slots`` chart requests are being worked on at once,
whatever the number of clients, and a small request competes with those few only.

Only the chart points of one title (``GET /api/v1/experiments/{id}/metrics/{title}``) take turns:
what the UI asks for in bulk and what costs the most per request. Everything else goes straight in.
"""

from __future__ import annotations

import asyncio
import re
import weakref

from starlette.types import ASGIApp, Receive, Scope, Send

CHART_PATH = re.compile(r"^/api/v1/experiments/[^/]+/metrics/.+")


def is_chart_read(method: str, path: str) -> bool:
    """A request for one title's chart points (the requests that take turns)."""
    return method == "GET" and CHART_PATH.match(path) is not None


class ChartGate:
    """ASGI middleware: at most ``slots`` chart reads at once; the rest wait on the event loop, in
    the order they came (asyncio's semaphore is fair)."""

    def __init__(self, app: ASGIApp, slots: int = 2) -> None:
        self.app = app
        self.slots = slots
        # a semaphore belongs to one event loop: one per loop (a test may serve an app from several)
        self._turns: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary()
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not is_chart_read(scope["method"], scope["path"]):
            await self.app(scope, receive, send)
            return
        loop = asyncio.get_running_loop()
        turns = self._turns.get(loop)
        if turns is None:
            turns = self._turns[loop] = asyncio.Semaphore(self.slots)
        async with turns:
            await self.app(scope, receive, send)
