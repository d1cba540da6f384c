"""Live charts and server restarts in a real browser (issue #16): a running experiment's new points
come in without losing the user's zoom, and a page lives through a server restart (its reads retried,
backing off, until the server is back; the console's stream says so and reconnects)."""

from __future__ import annotations

import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from phalanx.config import Settings
from phalanx.domain import Event, EventKind, ExperimentStatus, Replica, Role
from phalanx.machine.ports import free_port
from phalanx.store import open_store
from tests.e2e.conftest import shot
from tests.integration.server.serverproc import Server, start_server, stop_server

pytestmark = pytest.mark.browser

LOSS = "document.querySelector('.chart-card[data-title=\"loss\"]')"


@pytest.fixture(scope="module")
def store(shared: Server) -> Iterator[Any]:
    s = open_store(Settings(home=shared.home))
    yield s
    s.close()


@pytest.fixture(scope="module")
def server(shared: Server, store: Any) -> Server:
    """The session's shared server: each test makes its own experiments (the restart test stops and
    starts a server of its own, over a home of its own)."""
    return shared


def _running(store: Any) -> str:
    e = store.create_experiment(
        name="live", project="p", replicas=[Replica("", "master", Role.MASTER, 0, 0)], backend="local"
    )
    store.update_experiment(e.id, status=ExperimentStatus.RUNNING, started_at=time.time())
    return str(e.id)


def _points(store: Any, exp: str, start: int, n: int, seq: int) -> None:
    pts = [
        ["loss", s, i, 1.0 / (i + 1) + 0.1 * k, 1000.0 + i]
        for k, s in enumerate(("a", "b"))
        for i in range(start, start + n)
    ]
    store.write_events([Event(exp, EventKind.SCALAR, {"points": pts}, stream="live", seq=seq)])


def test_a_live_chart_keeps_the_users_zoom_and_hidden_series_across_refreshes(
    page: Any, server: Server, store: Any
) -> None:
    exp = _running(store)
    _points(store, exp, 0, 3000, 0)
    page.add_init_script("localStorage.setItem('phalanx.refreshMs', '700')")
    page.goto(f"{server.url}/experiments/{exp}#scalars")
    chart = page.locator('.chart-card[data-title="loss"]')
    chart.locator("canvas").wait_for()
    hidden = chart.locator(".u-legend .u-series").nth(2)
    hidden.locator("th").click()  # hide series "b"
    assert "u-off" in (hidden.get_attribute("class") or "")
    over = chart.locator(".u-over").bounding_box()
    y = over["y"] + over["height"] / 2
    page.mouse.move(over["x"] + over["width"] * 0.20, y)
    page.mouse.down()
    page.mouse.move(over["x"] + over["width"] * 0.40, y, steps=5)
    page.mouse.up()
    page.locator('.chart-card[data-title="loss"][data-detail="true"]').wait_for()
    zoom = chart.get_attribute("data-zoom")
    for i in range(3):  # three refreshes, each bringing new points
        _points(store, exp, 3000 + 500 * i, 500, i + 1)
        page.wait_for_function(
            f"n => Number({LOSS}.dataset.refreshes || 0) >= n",
            arg=i + 1,
        )
    assert chart.get_attribute("data-zoom") == zoom
    assert chart.get_attribute("data-detail") == "true"
    assert "u-off" in (chart.locator(".u-legend .u-series").nth(2).get_attribute("class") or "")
    # back to the whole series: the points that came in meanwhile are there
    chart.locator(".u-over").dblclick()
    page.wait_for_function("() => !document.querySelector('.chart-card[data-title=\"loss\"]').dataset.zoom")
    page.wait_for_function(f"() => {LOSS}.querySelector('.note').textContent.includes('9,000 points')")
    shot(page, "20-live-zoom-kept")


def test_the_run_table_sorts_by_a_metric_column_and_notes_are_editable(
    page: Any, server: Server, store: Any
) -> None:
    ids = []
    for i, best in enumerate([0.7, 0.9, 0.8]):
        e = store.create_experiment(name=f"run{i}", project="sorted")  # the module's other runs are in "p"
        pts = [["val/acc", "master", s, best * (s + 1) / 3, 1000.0 + s] for s in range(3)]
        store.write_events(
            [
                Event(e.id, EventKind.SCALAR, {"points": pts}, stream=f"t{i}", seq=0),
                Event(
                    e.id, EventKind.TEXT, {"title": "summary", "text": f"best {best}"}, stream=f"t{i}", seq=1
                ),
            ]
        )
        ids.append(e.id)
    page.goto(f"{server.url}/?col=metric:max:val/acc&project=sorted")
    header = page.locator('th[data-column="metric:max:val/acc"]')
    header.click()  # descending: best first, across every page
    page.wait_for_function(
        "() => document.querySelector('#experiments tbody tr[data-id]')?.textContent.includes('run1')"
    )
    cells = page.locator('#experiments tbody td[data-column="metric:max:val/acc"]').all_inner_texts()
    assert [round(float(c), 6) for c in cells] == [0.9, 0.8, 0.7]
    page.goto(f"{server.url}/experiments/{ids[1]}")
    page.locator("#reports .report", has_text="best 0.9").wait_for()
    page.fill("#edit-tags", "best, baseline")
    page.fill("#edit-notes", "the one to beat")
    page.click("#save-notes")
    page.locator("#notes-state", has_text="Saved").wait_for()
    got = store.get_experiment(ids[1])
    assert got.tags == ("best", "baseline") and got.notes == "the one to beat"


def test_the_console_collapses_progress_bars_renders_colours_marks_stderr_and_says_what_it_drops(
    page: Any, server: Server, store: Any
) -> None:
    e = store.create_experiment(name="noisy", project="p")
    bar = "".join(f"\r{p:3d}%|{'#' * (p // 10):<10}|" for p in range(0, 101, 5))
    lines = [f"line {i}" for i in range(12_000)] + [bar, "\x1b[31mred alert\x1b[0m plain"]
    store.write_events(
        [
            Event(e.id, EventKind.LOG, {"stream": "stdout", "lines": lines}, stream="c", seq=0),
            Event(e.id, EventKind.LOG, {"stream": "stderr", "lines": ["Traceback: boom"]}, stream="c", seq=1),
        ]
    )
    page.add_init_script("localStorage.setItem('phalanx.consoleLines', '10000')")
    page.goto(f"{server.url}/experiments/{e.id}#console")
    page.locator("#console .line", has_text="Traceback: boom").wait_for()
    bar_line = page.locator("#console .line", has_text="100%")
    assert bar_line.locator(".text").inner_text() == "100%|##########|"
    red = page.locator("#console .line", has_text="red alert").locator(".fg-red")
    assert red.inner_text() == "red alert"
    err = page.locator('#console .line[data-stream="stderr"]')
    assert err.locator(".err-mark").count() == 1
    note = page.locator("#console-dropped")
    note.wait_for()
    assert "2,003 earlier lines are not shown" in note.inner_text()
    assert page.locator("#console-cap").input_value() == "10000"
    with urllib.request.urlopen(f"{server.url}/api/v1/experiments/{e.id}/logs.txt", timeout=30) as r:
        assert r.read().decode().count("\n") == 12_003  # nothing lost: the whole log


RETRIES = 4  # failed tries of one read: the page retried it, backing off 0.5, 1 and 2 s


def test_a_page_lives_through_a_server_restart_and_the_console_says_live_only_while_connected(
    page: Any, tmp_path: Path
) -> None:
    """Two pages of a running experiment through one restart of its server: the Scalars tab keeps its
    chart under the Reconnecting banner while its reads fail, retried with backoff, then takes in the
    points written meanwhile; the console's badge says "live" only while its stream is connected.

    The server stays down until one of the Scalars tab's reads has failed RETRIES times (the event the
    test is about: the page goes on retrying, backing off, and replaces nothing), not for a fixed
    time: what the UI promises is retrying with backoff (0.5 s doubling to 5 s) until the server is
    back (docs/run-table.md), not a length of outage. It was 10 s, five failed tries."""
    home = tmp_path / "home"
    store = open_store(Settings(home=home))
    try:
        exp = _running(store)
        _points(store, exp, 0, 100, 0)
        store.write_events(
            [Event(exp, EventKind.LOG, {"stream": "stdout", "lines": ["hello"]}, stream="c", seq=0)]
        )
        port = free_port()
        server = start_server(home, port=port)
        try:
            failed: list[str] = []
            page.on("requestfailed", lambda r: failed.append(r.url) if "/api/v1/" in r.url else None)
            page.add_init_script("localStorage.setItem('phalanx.refreshMs', '500')")
            page.goto(f"{server.url}/experiments/{exp}#scalars")
            page.locator('.chart-card[data-title="loss"] canvas').wait_for()
            console = page.context.new_page()  # the same experiment's console, in a second tab
            errors: list[str] = []
            console.on("pageerror", lambda exc: errors.append(str(exc)))
            console.set_default_timeout(30_000)
            console.goto(f"{server.url}/experiments/{exp}#console")
            console.locator("#console .line", has_text="hello").wait_for()
            badge = console.locator("#console-state")
            console.wait_for_function("() => document.getElementById('console-state').textContent === 'live'")

            stop_server(server.proc)
            page.locator("#reconnecting").wait_for(timeout=15_000)
            console.wait_for_function(
                "() => document.getElementById('console-state').textContent === 'reconnecting…'",
                timeout=30_000,
            )
            while max(Counter(failed).values(), default=0) < RETRIES:
                page.wait_for_event("requestfailed", timeout=30_000)
            assert page.locator('.chart-card[data-title="loss"] canvas').count() == 1  # nothing replaced
            _points(store, exp, 100, 100, 1)
            server = start_server(home, port=port)
            page.locator("#reconnecting").wait_for(state="detached", timeout=30_000)
            page.wait_for_function(f"() => {LOSS}.querySelector('.note').textContent.includes('400 points')")
            page.click('a[data-tab="console"]')  # still a working page
            page.locator("#console").wait_for()
            console.wait_for_function(
                "() => document.getElementById('console-state').textContent === 'live'", timeout=60_000
            )
            assert badge.inner_text() == "live"
            assert not errors, f"the console page raised JavaScript errors: {errors}"
            # the console streams end before the server stops (a stream open holds it the 3 s of its
            # graceful shutdown): the second tab closes, the first goes back to Scalars
            console.close()
            page.click('a[data-tab="scalars"]')
            page.locator('.chart-card[data-title="loss"] canvas').wait_for()
        finally:
            stop_server(server.proc)
    finally:
        store.close()
