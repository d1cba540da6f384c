"""The run table in a real browser: the filter box reads the API's grammar, every column sorts on
the server, numbers are short with the full value on hover, and the table exports as CSV."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from phalanx.config import Settings
from phalanx.store import open_store
from tests.e2e.conftest import shot
from tests.integration.server.serverproc import Server, start_server, stop_server
from tests.unit.server import fill

pytestmark = pytest.mark.browser

OPTIMIZERS = ["adam", "sgd"]
LRS = [0.1, 0.01, 0.0005, 0.00031839345902151214]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    home = tmp_path_factory.mktemp("table-home")
    store = open_store(Settings(home=home))
    try:
        for i in range(12):
            e = fill.experiment(store, name=f"sweep-{i:02d}", project="table", n_workers=i % 3)
            fill.param(store, e.id, "Args", "optimizer", OPTIMIZERS[i % 2])
            fill.param(store, e.id, "Args", "lr", LRS[i % 4])
            fill.scalars(store, e.id, "val/acc", "master", [0.1, 0.3 + i / 37, 0.2 + i / 41])
    finally:
        store.close()
    s = start_server(home)
    yield s
    stop_server(s.proc)


def api(server: Server, path: str, query: list[tuple[str, str]]) -> Any:
    url = f"{server.url}/api/v1{path}?{urllib.parse.urlencode(query)}"
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.load(r)


def shown_ids(page: Any) -> list[str]:
    return list(
        page.locator("#experiments tbody tr[data-id]").evaluate_all("rows => rows.map(r => r.dataset.id)")
    )


def test_a_two_condition_filter_shows_exactly_what_the_api_returns(page: Any, server: Server) -> None:
    wanted = api(
        server,
        "/experiments",
        [("where", "param:optimizer=adam"), ("where", "param:lr<0.001"), ("limit", "50")],
    )
    expected = [e["id"] for e in wanted["items"]]
    assert len(expected) == 3  # adam at 0.0005: sweep-02, -06, -10 (sgd takes the odd ones)
    page.goto(f"{server.url}/?col=param:optimizer&col=param:lr")
    page.locator("#experiments tbody tr[data-id]").first.wait_for()
    assert len(shown_ids(page)) == 12
    box = page.locator('input[aria-label="column filter"]')
    box.fill("param:optimizer=adam and param:lr<0.001")
    box.press("Enter")
    page.wait_for_function(
        "n => document.querySelectorAll('#experiments tbody tr[data-id]').length === n", arg=len(expected)
    )
    assert shown_ids(page) == expected
    assert page.locator("#filter-error").is_hidden()
    assert "where=param" in page.url  # the filter is in the address, to share or reload
    shot(page, "40-two-condition-filter")

    either = "param:optimizer=adam and (param:lr<0.001 or param:lr=0.1)"
    both = [e["id"] for e in api(server, "/experiments", [("where", either), ("limit", "50")])["items"]]
    assert len(both) == 6 and set(expected) < set(both)  # the or keeps adam at 0.1 too
    box.fill(either)
    box.press("Enter")
    page.wait_for_function(
        "n => document.querySelectorAll('#experiments tbody tr[data-id]').length === n", arg=len(both)
    )
    assert shown_ids(page) == both

    box.fill("param:optimizer=adam and lr<0.001")  # the second one has no column kind
    box.press("Enter")
    error = page.locator("#filter-error")
    error.wait_for()
    assert "position 26: unknown column 'lr'" in error.inner_text() and "param:lr" in error.inner_text()
    assert box.get_attribute("aria-invalid") == "true"
    assert shown_ids(page) == both  # the last good result stays on screen
    box.fill("")
    box.press("Enter")
    page.wait_for_function("() => document.querySelectorAll('#experiments tbody tr[data-id]').length === 12")
    assert error.is_hidden()


def test_every_column_sorts_on_the_server_numbers_are_short_and_the_table_exports(
    page: Any, server: Server
) -> None:
    page.goto(f"{server.url}/?col=param:lr")
    page.locator("#experiments tbody tr[data-id]").first.wait_for()
    with page.expect_response(lambda r: "sort=-topology" in r.url):
        page.locator("th.sortable", has_text="topology").click()  # a computed column: the server sorts it
    expected = [
        e["id"] for e in api(server, "/experiments", [("sort", "-topology"), ("limit", "50")])["items"]
    ]
    page.wait_for_function(
        "ids => [...document.querySelectorAll('#experiments tbody tr[data-id]')]"
        ".map(r => r.dataset.id).join() === ids.join()",
        arg=expected,
    )
    cell = page.locator('#experiments tbody td[data-column="param:lr"]', has_text="0.0003").first
    assert cell.inner_text() == "0.00031839"  # 5 significant digits ...
    assert cell.get_attribute("title") == "0.00031839345902151214"  # ... the full value on hover
    with page.expect_download() as download:
        page.click("#export-csv")
    text = Path(download.value.path()).read_text()
    header, *rows = text.strip().splitlines()
    assert header.split(",")[-1] == "param:lr" and len(rows) == 12
    assert [r.split(",")[0] for r in rows] == expected  # the table's order, every row
    assert "0.00031839345902151214" in text  # full precision


def test_the_api_explorer_draws_every_operation_offline(page: Any, server: Server) -> None:
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url))
    page.goto(f"{server.url}/")
    page.click(".topbar a:has-text('API')")
    page.locator(".swagger-ui .opblock").first.wait_for()
    summaries = page.locator(".swagger-ui .opblock-summary-path").all_inner_texts()
    assert any("/api/v1/experiments.csv" in s for s in summaries), summaries
    assert all(u.startswith(server.url) for u in asked), [u for u in asked if not u.startswith(server.url)]


def test_sweep_analysis_of_a_filtered_list_and_of_a_selection(page: Any, server: Server) -> None:
    metric = "metric:max:val/acc"
    page.goto(f"{server.url}/?where=param%3Aoptimizer%3Dadam&col={metric}")
    page.wait_for_function("() => document.querySelectorAll('#experiments tbody tr[data-id]').length === 6")
    page.click("#analyse")  # nothing ticked: every run the filter keeps
    page.wait_for_url("**/sweep?**")
    page.locator('#importance[data-ready="true"]').wait_for()  # computed on the server, then shown
    doc = api(server, "/sweep", [("where", "param:optimizer=adam"), ("metric", metric)])
    assert doc["importance"]["ready"] and doc["params"] == ["lr"]  # optimizer is adam for all: no axis
    runs = doc["runs"]
    assert len(runs) == 6 and "where=param" in page.url and "metric=" in page.url
    assert page.locator("#parallel polyline").count() == 6
    assert "lr (log)" in page.locator("#parallel").inner_html()  # 0.0005 .. 0.1: a log axis
    rows = page.locator("#sweep-runs tbody tr")
    assert [r.get_attribute("data-id") for r in rows.all()] == [r["id"] for r in runs]
    best = max(r["value"] for r in runs)
    assert float(str(page.locator("#best-so-far").get_attribute("data-best"))) == pytest.approx(best)
    shown_lr = page.locator('#importance tr[data-param="lr"]').get_attribute("data-importance")
    assert float(str(shown_lr)) == pytest.approx(doc["importance"]["values"]["lr"])
    line = page.locator("#parallel polyline").first
    line.dispatch_event("mouseenter")  # hover names the run and its values
    assert runs[0]["id"] in page.locator("#sweep-hover").inner_text()

    # brush the metric's upper half: only the runs there stay in the table
    box = page.locator('#parallel line[data-axis="value"]').bounding_box()
    x = box["x"] + box["width"] / 2
    page.mouse.move(x, box["y"] - 3)
    page.mouse.down()
    page.mouse.move(x, box["y"] + box["height"] * 0.5, steps=6)
    page.mouse.up()
    lo, hi = min(r["value"] for r in runs), best
    upper = sorted(r["id"] for r in runs if (r["value"] - lo) / (hi - lo) >= 0.5)
    assert len(upper) == 3
    assert sorted(str(r.get_attribute("data-id")) for r in rows.all() if r.is_visible()) == upper

    page.set_viewport_size({"width": 390, "height": 844})
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, f"the sweep page is {width} px wide on a 390 px screen"
    page.set_viewport_size({"width": 1400, "height": 900})

    # a selection: three ticked runs of both optimizers, a categorical axis next to lr's
    page.goto(f"{server.url}/?col={metric}")
    page.locator("#experiments tbody tr[data-id]").first.wait_for()
    picked = shown_ids(page)[:3]
    for i in picked:
        page.check(f'#experiments tr[data-id="{i}"] input[type="checkbox"]')
    page.click("#analyse")
    page.wait_for_url("**/sweep?**ids=**")
    page.locator("#parallel polyline").first.wait_for()
    assert page.locator("#parallel polyline").count() == 3
    assert sorted(str(r.get_attribute("data-id")) for r in rows.all()) == sorted(picked)
    assert page.locator('#parallel line[data-axis="optimizer"]').count() == 1
    shot(page, "41-sweep-of-a-selection")


def test_columns_hide_and_move_and_the_layout_survives_a_reload(page: Any, server: Server) -> None:
    def heads() -> list[str]:
        return list(
            page.locator("#experiments thead th[data-column]").evaluate_all(
                "ths => ths.map(t => t.dataset.column)"
            )
        )

    page.goto(f"{server.url}/?col=param:lr")
    page.locator("#experiments tbody tr[data-id]").first.wait_for()
    assert heads()[:3] == ["id", "name", "project"] and heads()[-1] == "param:lr"
    page.click("#columns-menu summary")
    page.uncheck('#columns-menu input[data-column="framework"]')
    page.uncheck('#columns-menu input[data-column="topology"]')
    page.click('button[aria-label="move param:lr left"]')
    page.click('button[aria-label="move name left"]')
    expected = ["name", "id", "project", "status", "started", "duration", "tags", "param:lr", "group"]
    assert heads() == expected
    first = page.locator("#experiments tbody tr[data-id]").first
    cells = first.locator("td").all()  # the body follows the header: the lr cell sits under its head
    assert cells[expected.index("param:lr") + 1].get_attribute("data-column") == "param:lr"
    assert "hide=framework" in page.url and "arrange=" in page.url
    page.reload()  # the address keeps the layout (so does a shared link)
    page.locator("#experiments tbody tr[data-id]").first.wait_for()
    assert heads() == expected
    assert not page.locator('#columns-menu input[data-column="framework"]').is_checked()
    page.set_viewport_size({"width": 390, "height": 844})
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, f"the run table is {width} px wide on a 390 px screen"
