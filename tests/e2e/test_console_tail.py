"""A finished experiment's console opens at its tail: the first request asks for the last lines,
and the last line is on screen without streaming the 60,000 before it."""

from __future__ import annotations

from typing import Any

import pytest

from phalanx.config import Settings
from phalanx.domain import EventKind
from phalanx.store import open_store
from tests.e2e.conftest import shot
from tests.integration.server.serverproc import Server
from tests.unit.server import fill

pytestmark = pytest.mark.browser

LINES = 60_000


@pytest.fixture(scope="module")
def finished(shared: Server) -> tuple[Server, str]:
    store = open_store(Settings(home=shared.home))
    try:
        e = fill.experiment(store, name="chatty")
        events = []
        for block in range(0, LINES, 5_000):
            text = [f"line {i}" for i in range(block, block + 5_000)]
            data = {"lines": text, "stream": "stdout"}
            events.append(fill.event(e.id, EventKind.LOG, data, "master", time=1000.0 + block))
        store.write_events(events)
    finally:
        store.close()
    return shared, e.id


def test_a_finished_console_opens_at_its_last_line(page: Any, finished: tuple[Server, str]) -> None:
    server, exp = finished
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url) if "/logs" in r.url else None)
    page.add_init_script("localStorage.setItem('phalanx.consoleLines', '10000')")  # keep the last 10,000
    page.goto(f"{server.url}/experiments/{exp}#console")
    page.locator("#console .line", has_text=f"line {LINES - 1}").wait_for()
    first = asked[0]
    assert "/logs?" in first and "from_end=true" in first and "offset=0" in first, asked
    assert not any("/logs/stream" in u for u in asked)  # nothing streamed from the first line
    page.locator("#console[data-loaded]").wait_for(timeout=120_000)  # then earlier pages, read backwards
    texts = page.locator("#console .line .text")
    assert texts.count() == 10_000  # the lines kept, the last ones
    assert texts.first.inner_text() == f"line {LINES - 10_000}"
    assert texts.last.inner_text() == f"line {LINES - 1}"
    assert page.locator("#follow").is_checked()
    at_bottom = "c => c.scrollHeight - c.scrollTop - c.clientHeight < 24"
    assert page.locator("#console").evaluate(at_bottom)
    assert "Earlier lines are not shown" in page.locator("#console-dropped").inner_text()
    backwards = [u for u in asked if "from_end=true" in u]
    offsets = [
        (int(u.split("offset=")[1].split("&")[0]), int(u.split("limit=")[1].split("&")[0])) for u in backwards
    ]
    assert offsets == [(0, 1_000), (1_000, 9_000), (10_000, 1)]  # a screenful, the rest kept, is there more?
    shot(page, "50-console-tail")
