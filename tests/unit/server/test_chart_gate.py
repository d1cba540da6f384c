"""Chart reads take turns (phalanx.server.gate): however many clients pull charts, at most ``slots``
of them are worked on at once, and the list and every other request go straight past the queue."""

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


def test_the_server_puts_chart_reads_through_the_gate_outermost(client: TestClient) -> None:
    outermost = client.app.user_middleware[0]  # type: ignore[attr-defined]
    assert outermost.cls is ChartGate
