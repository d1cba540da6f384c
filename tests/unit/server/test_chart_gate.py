"""Chart reads take turns (phalanx.server.gate): however many clients pull charts, at most ``slots``
of them are worked on at once, the list and every other request go straight past the queue, and a
chart read with its turn lets a list that waits for its answer go first (for ``yield_s`` at most)."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi.testclient import TestClient

from phalanx.server.gate import ChartGate, is_chart_read
from tests.support.aio import run_in_own_loop


def test_only_one_titles_chart_points_take_turns() -> None:
    assert is_chart_read("GET", "/api/v1/experiments/abc123/metrics/loss")
    assert is_chart_read("GET", "/api/v1/experiments/abc123/metrics/train/loss")
    assert not is_chart_read("GET", "/api/v1/experiments/abc123/metrics")  # the titles: small
    assert not is_chart_read("GET", "/api/v1/experiments")
    assert not is_chart_read("POST", "/api/v1/experiments/abc123/metrics/loss")


def test_twenty_chart_reads_run_two_at_a_time_while_the_list_goes_past() -> None:
    async def scenario() -> tuple[int, list[str]]:
        release = asyncio.Event()
        running = 0
        most = 0
        finished: list[str] = []

        async def app(scope: Any, receive: Any, send: Any) -> None:
            nonlocal running, most
            if scope["path"].endswith("/metrics/loss"):
                running += 1
                most = max(most, running)
                await release.wait()  # a chart read holds its turn until released
                running -= 1
            finished.append(scope["path"])

        gate = ChartGate(app, slots=2)

        def request(path: str) -> Any:
            return gate({"type": "http", "method": "GET", "path": path}, None, None)

        charts = [asyncio.create_task(request("/api/v1/experiments/e1/metrics/loss")) for _ in range(20)]
        for _ in range(5):  # every chart request reached the gate
            await asyncio.sleep(0)
        # the list is answered while all twenty chart reads are still waiting or running
        await asyncio.wait_for(request("/api/v1/experiments"), 10)
        listed_first = list(finished)
        release.set()
        await asyncio.wait_for(asyncio.gather(*charts), 10)
        return most, listed_first

    most, listed_first = run_in_own_loop(scenario)
    assert most == 2
    assert listed_first == ["/api/v1/experiments"]


async def _sent(message: Any) -> None:
    """An ASGI ``send`` that drops what it is given."""


def test_a_chart_read_lets_a_list_waiting_for_its_answer_go_first() -> None:
    async def scenario() -> list[str]:
        listed = asyncio.Event()
        events: list[str] = []

        async def app(scope: Any, receive: Any, send: Any) -> None:
            if scope["path"] == "/api/v1/experiments":
                await listed.wait()  # the list's own work
                await send({"type": "http.response.start", "status": 200, "headers": []})
                events.append("list answered")
            else:
                events.append("chart started")

        gate = ChartGate(app, slots=2, yield_s=60)

        def request(path: str) -> Any:
            return gate({"type": "http", "method": "GET", "path": path}, None, _sent)

        listing = asyncio.create_task(request("/api/v1/experiments"))
        await asyncio.sleep(0)
        chart = asyncio.create_task(request("/api/v1/experiments/e1/metrics/loss"))
        for _ in range(5):
            await asyncio.sleep(0)
        events.append("list released")
        listed.set()
        await asyncio.wait_for(asyncio.gather(listing, chart), 10)
        return events

    # the chart waited for the list although it had a turn of its own (before, it started at once)
    assert run_in_own_loop(scenario) == ["list released", "list answered", "chart started"]


def test_a_live_console_a_write_or_a_slow_list_hold_a_chart_back_at_most_a_moment() -> None:
    async def scenario(path: str, method: str, yield_s: float) -> bool:
        never = asyncio.Event()
        charted = asyncio.Event()

        async def app(scope: Any, receive: Any, send: Any) -> None:
            if scope["path"].endswith("/metrics/loss"):
                charted.set()
                return
            if scope["path"].endswith("/console"):  # server-sent events: answered, then never ends
                await send({"type": "http.response.start", "status": 200, "headers": []})
            await never.wait()

        gate = ChartGate(app, slots=2, yield_s=yield_s)
        other = asyncio.create_task(gate({"type": "http", "method": method, "path": path}, None, _sent))
        await asyncio.sleep(0)
        chart = {"type": "http", "method": "GET", "path": "/api/v1/experiments/e1/metrics/loss"}
        await asyncio.wait_for(gate(chart, None, _sent), 10)
        other.cancel()
        return charted.is_set()

    # a console's answer has started: it is not waited for, however long it streams
    assert run_in_own_loop(lambda: scenario("/api/v1/experiments/e1/console", "GET", 60))
    # a replica's records (a write) are not a read a person waits on
    assert run_in_own_loop(lambda: scenario("/api/v1/ingest", "POST", 60))
    # nor a running service's page, which answers when the service does (a slow TensorBoard)
    assert run_in_own_loop(lambda: scenario("/services/s1/data/runs", "GET", 60))
    # a list that never answers holds the chart back for yield_s, then the chart goes on
    assert run_in_own_loop(lambda: scenario("/api/v1/experiments", "GET", 0.05))


def test_the_server_puts_chart_reads_through_the_gate_outermost(client: TestClient) -> None:
    outermost = client.app.user_middleware[0]  # type: ignore[attr-defined]
    assert outermost.cls is ChartGate
