"""Console output: pages of log lines per replica, and a live follow with server-sent events.

The stream polls the store (the supervisor's ingester writes lines there as replicas print them), so
it works the same whichever backend ran the experiment, and ends by itself once the experiment is
done and every line was sent.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.parse
from collections.abc import AsyncIterator, Iterator
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from phalanx.domain import BUILD_CONSOLE, Experiment, LogLine, console_sources
from phalanx.server.deps import SettingsDep, StoreDep, experiment_of
from phalanx.server.policy import policy
from phalanx.server.schemas import LogLineOut, LogsOut
from phalanx.store.base import Store
from phalanx.views import check_console

router = APIRouter(tags=["logs"])

BATCH = 1000
KEEPALIVE_SECONDS = 15.0
ReplicaQuery = Annotated[
    str | None, Query(max_length=100, description="e.g. worker-1; every replica if absent")
]


@router.get("/experiments/{experiment_id}/logs", response_model=LogsOut)
@policy("experiment:viewer")
def logs(
    experiment_id: str,
    store: StoreDep,
    replica: ReplicaQuery = None,
    offset: Annotated[int, Query(ge=0, le=10**12)] = 0,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    from_end: Annotated[
        bool,
        Query(
            description="count offset back from the last line: offset=0 is the last `limit` lines, "
            "next_offset the page before (a finished console opens at its tail)"
        ),
    ] = False,
) -> LogsOut:
    """Lines from ``offset`` on (the offset counts lines of one replica when ``replica`` is given);
    404 for a replica the experiment never had."""
    e = experiment_of(store, experiment_id)
    check_replica(store, e, replica)
    lines = store.logs(e.id, replica=replica or None, offset=offset, limit=limit, from_end=from_end)
    if from_end:
        return LogsOut(lines=[LogLineOut.of(line) for line in lines], next_offset=offset + len(lines))
    next_offset = max((line.offset + 1 for line in lines), default=offset) if replica else offset + len(lines)
    return LogsOut(lines=[LogLineOut.of(line) for line in lines], next_offset=next_offset)


@router.get(
    "/experiments/{experiment_id}/logs.txt",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/plain": {}}, "description": "every line, '[replica] text'"}},
)
@policy("experiment:viewer")
def download_logs(experiment_id: str, store: StoreDep, replica: ReplicaQuery = None) -> StreamingResponse:
    """The whole console as plain text (the UI keeps only its last N lines on screen: this has all)."""
    e = experiment_of(store, experiment_id)
    check_replica(store, e, replica)

    def lines() -> Iterator[bytes]:
        offset = 0
        while True:
            batch = store.logs(e.id, replica=replica or None, offset=offset, limit=10_000)
            if not batch:
                return
            yield "".join(
                f"[{line.replica}{' stderr' if line.stream == 'stderr' else ''}] {line.text}\n"
                for line in batch
            ).encode()
            offset = (batch[-1].offset + 1) if replica else offset + len(batch)

    safe = "".join(c for c in (replica or "") if c.isascii() and (c.isalnum() or c in "-_"))
    name = f"{e.id}{'-' + safe if safe else ''}.log"  # a header is latin-1: nothing else in it
    return StreamingResponse(
        lines(),
        media_type="text/plain; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{name}"'},
    )


@router.get(
    "/experiments/{experiment_id}/logs/stream",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/event-stream": {}}, "description": "`line` events, then `end`"}},
)
@policy("experiment:viewer")
async def stream_logs(
    experiment_id: str,
    request: Request,
    store: StoreDep,
    settings: SettingsDep,
    replica: ReplicaQuery = None,
    offset: Annotated[int, Query(ge=0, le=10**12, description="start here (with replica)")] = 0,
) -> StreamingResponse:
    """Server-sent events: one ``line`` event per log line (JSON), live while the experiment runs,
    then one ``end`` event once it is done and everything was sent."""
    e = await run_in_threadpool(experiment_of, store, experiment_id)
    await run_in_threadpool(check_replica, store, e, replica)
    follower = _Follower(store, e.id, replica or None, offset)
    # A browser reconnecting (server restart, network blip) sends the id of the last event it got:
    # resume after it instead of sending every line again.
    resume = parse_event_id(request.headers.get("last-event-id", ""))
    if resume is not None:
        follower.offsets = (
            {follower.replica: resume.get(follower.replica, offset)} if follower.replica else resume
        )
    return StreamingResponse(
        _events(follower, request, settings.poll_seconds),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def check_replica(store: Store, experiment: Experiment, replica: str | None) -> None:
    """NotFound (404) for a replica name the experiment has no row and no line of (a typo read as an
    empty console before), with its names and the nearest one (``views.check_console``, as the CLI
    on either door). ``build`` is an empty page, not a 404, for an experiment that had no build:
    every follower (`phalanx logs` over a server, ``ExperimentFollower``, an older CLI) reads each
    experiment's build console first; `phalanx logs --replica build` refuses it itself."""
    if replica != BUILD_CONSOLE:
        check_console(store, experiment, replica)


class _Follower:
    """Remembers, per replica, the offset of the next line to send."""

    def __init__(self, store: Store, experiment_id: str, replica: str | None, offset: int) -> None:
        self.store = store
        self.experiment_id = experiment_id
        self.replica = replica
        self.offsets: dict[str, int] = {replica: offset} if replica else {}

    def poll(self) -> tuple[list[LogLine], bool]:
        """New lines since the last poll, and whether the experiment was done before reading them."""
        done = self.store.get_experiment(self.experiment_id).status.done
        if not self.replica:
            names = [r.name for r in self.store.list_replicas(self.experiment_id)]
            if not names and set(self.offsets) <= {BUILD_CONSOLE}:  # no replica known yet
                names = sorted({line.replica for line in self.store.logs(self.experiment_id, limit=BATCH)})
            for name in console_sources(names):
                self.offsets.setdefault(name, 0)
        new: list[LogLine] = []
        for name, start in sorted(self.offsets.items()):
            lines = self.store.logs(self.experiment_id, replica=name, offset=start, limit=BATCH)
            if lines:
                self.offsets[name] = max(line.offset for line in lines) + 1
                new.extend(lines)
        new.sort(key=lambda line: (line.time, line.replica, line.offset))
        return new, done


def event_id(sent: dict[str, int]) -> str:
    """Every replica's next offset (``master:12,worker-0:9``): what a reconnect resumes from."""
    return ",".join(f"{urllib.parse.quote(name, safe='-_.')}:{n}" for name, n in sorted(sent.items()))


def parse_event_id(text: str) -> dict[str, int] | None:
    """The offsets an ``event_id`` names; None when it is missing or malformed (start over)."""
    if not text or len(text) > 100_000:
        return None
    out: dict[str, int] = {}
    for part in text.split(","):
        name, sep, number = part.rpartition(":")
        if not sep or not name or not number.isdigit() or len(number) > 12:
            return None
        out[urllib.parse.unquote(name)] = int(number)
    return out


async def _events(follower: _Follower, request: Request, poll_seconds: float) -> AsyncIterator[str]:
    last_sent = time.monotonic()
    sent = dict(follower.offsets)
    yield "retry: 2000\n\n"
    while True:
        if await request.is_disconnected():
            return
        lines, done = await run_in_threadpool(follower.poll)
        for line in lines:
            data = json.dumps(LogLineOut.of(line).model_dump())
            sent[line.replica] = line.offset + 1
            yield f"event: line\nid: {event_id(sent)}\ndata: {data}\n\n"
            last_sent = time.monotonic()
        if lines:
            continue  # there may be more right away
        if done:
            yield "event: end\ndata: {}\n\n"
            return
        if time.monotonic() - last_sent > KEEPALIVE_SECONDS:
            yield ": keepalive\n\n"
            last_sent = time.monotonic()
        await asyncio.sleep(poll_seconds)
