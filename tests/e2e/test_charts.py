"""What the charts draw, read from the page: each chart card carries its uPlot instance (`card.plot`),
so these tests check the scales and data arrays uPlot draws from, not only that a canvas exists."""

from __future__ import annotations

import colorsys
import json
import re
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from phalanx.config import Settings
from phalanx.domain import Event, EventKind, ExperimentStatus, Replica, Role
from phalanx.server.chartdata import decode
from phalanx.store import open_store
from tests.e2e.conftest import shot
from tests.integration.server.serverproc import Server

pytestmark = pytest.mark.browser

RANKS = 3
TRIALS = 14


@dataclass
class Runs:
    ranks: str  # one run, a loss series per rank, spanning four decades
    t0: float  # its first point's wall time
    trials: list[str]  # fourteen runs of one series each, as a group's trials


def scalar_run(home: Path, name: str, series: int, points: int, t0: float, scale: float = 1.0) -> str:
    store = open_store(Settings(home=home))
    try:
        e = store.create_experiment(
            name=name,
            project="charts",
            replicas=[Replica("", "master", Role.MASTER, 0, 0)],
            topology={"master": 1},
            framework="pytorch",
        )
        events = []
        for w in range(series):
            value = [scale * (10.0 * 10 ** (-4 * i / points) + 0.01 * w) for i in range(points)]
            pts = [["loss", f"worker {w:02d}", i, value[i], t0 + 2.0 * i] for i in range(points)]
            data = {"points": pts}
            events.append(Event(e.id, EventKind.SCALAR, data, "master", "master", 0, 0, t0, "c", w))
        store.write_events(events)
        store.update_experiment(
            e.id, status=ExperimentStatus.SUCCEEDED, started_at=t0, finished_at=t0 + 2.0 * points
        )
        return e.id
    finally:
        store.close()


@pytest.fixture(scope="module")
def runs(shared: Server) -> tuple[Path, Runs]:
    home = shared.home
    t0 = float(int(time.time()) - 7200)
    ranks = scalar_run(home, "three ranks", RANKS, 300, t0)
    trials = [scalar_run(home, f"trial {i}", 1, 40, t0 + 60 * i, scale=1 + i / 10) for i in range(TRIALS)]
    return home, Runs(ranks, t0, trials)


@pytest.fixture(scope="module")
def server(shared: Server, runs: tuple[Path, Runs]) -> Server:
    return shared


def api(server: Server, path: str, **query: Any) -> Any:
    url = f"{server.url}/api/v1{path}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.load(r)


def chart_data(server: Server, path: str, **query: Any) -> Any:
    """A chart's points as the UI gets them: the compact form, decoded (the same running sums)."""
    doc = api(server, path, **query, format="compact")
    return {"title": doc["title"], "x": doc["x"], "series": decode(doc)}


CARD = '.chart-card[data-title="loss"]'


def plot(page: Any, root: str = "") -> Any:
    """The loss chart's scales, x values, series labels and data columns as uPlot holds them."""
    return page.evaluate(
        """sel => { const u = document.querySelector(sel).plot;
          return { x: u.data[0], cols: u.data.slice(1), labels: u.series.slice(1).map(s => s.label),
                   xscale: { min: u.scales.x.min, max: u.scales.x.max, time: u.scales.x.time },
                   yscale: { min: u.scales.y.min, max: u.scales.y.max, distr: u.scales.y.distr },
                   idxs: u.series[0].idxs }; }""",
        f"{root} {CARD}",
    )


def drawn_points(xs: list[float], col: list[float | None]) -> list[tuple[float, float]]:
    """One series' (x, y) pairs as uPlot has them (the aligned arrays hold nulls for other x)."""
    return [(x, y) for x, y in zip(xs, col, strict=True) if y is not None]


def wait_plot(page: Any, condition: str, root: str = "") -> None:
    page.wait_for_function(
        "sel => { const c = document.querySelector(sel); const u = c && c.plot;"
        f" return !!u && ({condition}); }}",
        arg=f"{root} {CARD}",
    )


def test_log_scale_makes_the_y_axis_logarithmic_on_scalars_and_compare(
    page: Any, server: Server, runs: tuple[Path, Runs]
) -> None:
    _, r = runs
    page.goto(f"{server.url}/experiments/{r.ranks}#scalars")
    wait_plot(page, "u.scales.y.distr === 1")
    assert plot(page)["yscale"]["min"] <= 0  # linear, from zero
    page.check("#log-scale")
    wait_plot(page, "u.scales.y.distr === 3")
    y = plot(page)["yscale"]
    # four decades of loss: a log axis starts above zero, at or below the smallest value
    assert 0 < y["min"] <= 10 * 10**-4 * 1.1 and y["max"] >= 10
    shot(page, "30-log-scale")
    page.uncheck("#log-scale")
    wait_plot(page, "u.scales.y.distr === 1")

    page.goto(f"{server.url}/compare?ids={r.ranks},{r.trials[0]}")
    wait_plot(page, "u.scales.y.distr === 1", "#compare-charts")
    page.check("#log-scale")
    wait_plot(page, "u.scales.y.distr === 3 && u.scales.y.min > 0", "#compare-charts")


def test_wall_time_and_relative_time_change_the_x_values(
    page: Any, server: Server, runs: tuple[Path, Runs]
) -> None:
    _, r = runs
    page.goto(f"{server.url}/experiments/{r.ranks}#scalars")
    wait_plot(page, "u.data[0].length > 0")
    assert plot(page)["x"][:3] == [0, 1, 2]  # steps
    page.select_option('select[aria-label="x axis"]', "time")
    wait_plot(page, "u.scales.x.time === true")
    drawn = plot(page)
    sent = chart_data(server, f"/experiments/{r.ranks}/metrics/loss", max_points=2000, x="time")["series"]
    times = sorted({t for s in sent.values() for t in s["times"]})
    assert drawn["x"] == times  # timestamps, in order
    assert drawn["x"][0] == r.t0 and all(a < b for a, b in zip(drawn["x"], drawn["x"][1:], strict=False))
    assert drawn["xscale"]["min"] >= r.t0 - 600  # the axis shows those timestamps, not steps
    page.select_option('select[aria-label="x axis"]', "relative")
    wait_plot(page, "u.scales.x.time === false && u.data[0][0] === 0")
    assert plot(page)["x"] == [t - r.t0 for t in times]  # seconds since the first point


def test_smoothing_draws_the_debiased_moving_average_of_the_points(
    page: Any, server: Server, runs: tuple[Path, Runs]
) -> None:
    _, r = runs
    page.goto(f"{server.url}/experiments/{r.ranks}#scalars")
    wait_plot(page, "u.data[0].length > 0")
    sent = chart_data(server, f"/experiments/{r.ranks}/metrics/loss", max_points=2000)["series"]
    raw = sent["worker 01"]["values"]
    assert plot(page)["cols"][1] == raw
    page.locator('input[aria-label="smoothing"]').evaluate(
        "el => { el.value = '0.9'; el.dispatchEvent(new Event('input', { bubbles: true })); }"
    )
    wait_plot(page, f"u.data[2][5] !== null && Math.abs(u.data[2][5] - {raw[5]!r}) > 1e-9")
    expected, last = [], 0.0
    for n, v in enumerate(raw, start=1):
        last = last * 0.9 + 0.1 * v
        expected.append(last / (1 - 0.9**n))
    drawn = plot(page)["cols"][1]
    assert drawn == pytest.approx(expected, rel=1e-9)


def rgb(css: str) -> tuple[float, float, float]:
    """'rgb(r, g, b)' -> hue (degrees), lightness, saturation."""
    r, g, b = (int(v) / 255 for v in re.findall(r"\d+", css)[:3])
    h, light, s = colorsys.rgb_to_hls(r, g, b)
    return h * 360, light, s


def legend_colours(page: Any, root: str = "") -> dict[str, str]:
    return dict(
        page.evaluate(
            """sel => [...document.querySelectorAll(sel + ' .u-legend .u-series')].slice(1).map(s =>
                 [s.querySelector('.u-label').textContent,
                  getComputedStyle(s.querySelector('.u-marker')).borderColor])""",
            f"{root} {CARD}",
        )
    )


def test_each_run_has_its_own_colour_everywhere_and_its_ranks_are_shades_of_it(
    page: Any, server: Server, runs: tuple[Path, Runs]
) -> None:
    _, r = runs
    page.goto(f"{server.url}/compare?ids={','.join(r.trials)}")
    wait_plot(page, f"u.series.length === {TRIALS + 1}", "#compare-charts")
    on_compare = legend_colours(page, "#compare-charts")
    assert len(on_compare) == TRIALS
    assert len(set(on_compare.values())) == TRIALS, on_compare  # fourteen trials, fourteen colours
    shot(page, "31-fourteen-trials")
    for trial in (r.trials[0], r.trials[7], r.trials[-1]):  # the same colour on the run's own page
        page.goto(f"{server.url}/experiments/{trial}#scalars")
        wait_plot(page, "u.series.length === 2")
        (own,) = legend_colours(page).values()
        (there,) = [c for label, c in on_compare.items() if f"({trial[:6]})" in label]
        assert own == there, trial

    page.goto(f"{server.url}/experiments/{r.ranks}#scalars")
    wait_plot(page, f"u.series.length === {RANKS + 1}")
    shades = [rgb(c) for c in legend_colours(page).values()]
    hues = [h for h, _, _ in shades]
    around = [(h - hues[0] + 180) % 360 - 180 for h in hues]  # on the wheel: 345° and 15° are 30° apart
    assert max(around) - min(around) <= 31, shades  # shades of the run's colour, within ±15° of its hue ...
    # ... each rank its own hue and lightness (by lightness alone two ranks were two near-identical blues)
    assert len({round(h) for h in hues}) == RANKS, shades
    assert len({round(light, 2) for _, light, _ in shades}) == RANKS, shades


CLOSE_IDS = ("00000bc0ffee", "000010c0ffee")  # ids whose hashed hues are 0.02° apart


def test_runs_drawn_together_get_distinct_colours_kept_on_their_own_pages(
    page: Any, server: Server, runs: tuple[Path, Runs]
) -> None:
    home, r = runs
    store = open_store(Settings(home=home))
    try:
        for i, eid in enumerate(CLOSE_IDS):
            e = store.create_experiment(name=f"close hue {i}", project="charts", experiment_id=eid)
            pts = [["loss", "master", k, 1.0 + i + 1 / (k + 1), r.t0 + k] for k in range(20)]
            store.write_events(
                [Event(e.id, EventKind.SCALAR, {"points": pts}, "master", "master", 0, 0, r.t0, "h", 0)]
            )
    finally:
        store.close()
    page.goto(f"{server.url}/")
    hashed = page.evaluate(
        "ids => import('/static/js/util.js').then(m => ids.map(i => m.runColor(i)))", list(CLOSE_IDS)
    )
    first, second = (float(c.split("(")[1].split(",")[0]) for c in hashed)
    assert abs(first - second) < 1  # left to the hash, the two would be the same colour
    page.goto(f"{server.url}/compare?ids={','.join(CLOSE_IDS)}")
    wait_plot(page, "u.series.length === 3", "#compare-charts")
    on_compare = legend_colours(page, "#compare-charts")
    hues = [rgb(c)[0] for c in on_compare.values()]
    gap = abs(hues[0] - hues[1]) % 360
    assert min(gap, 360 - gap) >= 38, on_compare  # drawn together: far apart
    for eid in CLOSE_IDS:  # and the same colour on the run's own page
        page.goto(f"{server.url}/experiments/{eid}#scalars")
        wait_plot(page, "u.series.length === 2")
        (own,) = legend_colours(page).values()
        (there,) = [c for label, c in on_compare.items() if f"({eid[:6]})" in label]
        assert own == there, eid


def test_a_drag_zoom_draws_exactly_the_points_the_api_returns_for_that_window(
    page: Any, server: Server, runs: tuple[Path, Runs]
) -> None:
    """8 series of 100,000 points (800,000): the page gets 2,000 per series (peaks kept); a drag-zoom
    over about 1% of the steps fetches that window, and uPlot then draws those points, all of them,
    not a slice of the coarse arrays (that drew a sawtooth that was not in the data)."""
    from tests.e2e.demo_store import fill_large

    exp = fill_large(runs[0])
    page.goto(f"{server.url}/experiments/{exp}#scalars")
    chart = page.locator(CARD)
    wait_plot(page, "u.series.length === 9")
    assert "800,000 points" in chart.locator(".note").inner_text()
    sent = chart_data(server, f"/experiments/{exp}/metrics/loss", max_points=2000)["series"]
    assert all(len(s["values"]) <= 2000 for s in sent.values())
    assert max(v for v in sent["worker 00"]["values"] if v is not None) == 9.5  # the spike is kept
    coarse = plot(page)
    for label, col in zip(coarse["labels"], coarse["cols"], strict=True):
        pairs = list(zip(sent[label]["steps"], sent[label]["values"], strict=True))
        assert drawn_points(coarse["x"], col) == pairs, label
    shot(page, "32-large-series")

    over = chart.locator(".u-over").bounding_box()
    y = over["y"] + over["height"] / 2
    page.mouse.move(over["x"] + over["width"] * 0.30, y)
    page.mouse.down()
    page.mouse.move(over["x"] + over["width"] * 0.31, y, steps=5)
    page.mouse.up()
    page.locator(f'{CARD}[data-detail="true"]').wait_for()
    lo, hi = (float(v) for v in chart.get_attribute("data-zoom").split(","))
    window = chart_data(
        server, f"/experiments/{exp}/metrics/loss", max_points=2000, x="step", x_min=lo, x_max=hi
    )
    detail = window["series"]
    steps = detail["worker 00"]["steps"]
    assert 100 < len(steps) <= 2000 and steps == list(range(steps[0], steps[-1] + 1))  # every point
    drawn = plot(page)
    assert drawn["x"] == steps
    assert drawn["labels"] == sorted(detail)
    for label, col in zip(drawn["labels"], drawn["cols"], strict=True):
        # count and values
        assert drawn_points(drawn["x"], col) == list(zip(steps, detail[label]["values"], strict=True)), label
    assert drawn["idxs"] == [0, len(steps) - 1]  # and uPlot draws all of them, not an old index window
    assert drawn["xscale"]["min"] == lo and drawn["xscale"]["max"] == hi
    in_window = [x for x in coarse["x"] if lo <= x <= hi]
    assert len(in_window) < len(steps) / 10  # the coarse view had far fewer points there
    shot(page, "33-zoomed")
    chart.locator(".u-over").dblclick()
    page.wait_for_function(f"() => !document.querySelector('{CARD}').dataset.detail")
    wait_plot(page, f"u.data[0].length === {len(coarse['x'])}")


def test_system_metrics_have_their_own_section_on_a_wall_time_axis(
    page: Any, server: Server, runs: tuple[Path, Runs]
) -> None:
    home, r = runs
    exp = scalar_run(home, "with system metrics", 1, 50, r.t0)
    store = open_store(Settings(home=home))
    try:
        pts = [["system/cpu_percent", "master", i, 50.0 + i % 7, r.t0 + 5.0 * i] for i in range(40)]
        data = {"points": pts}
        store.write_events([Event(exp, EventKind.SCALAR, data, "master", "master", 0, 0, r.t0, "sys", 0)])
    finally:
        store.close()
    page.goto(f"{server.url}/experiments/{exp}#scalars")
    card = '#system-charts .chart-card[data-title="system/cpu_percent"]'
    page.wait_for_function(f"() => document.querySelector('{card}')?.plot?.scales.x.time === true")
    assert page.locator('#charts .chart-card[data-title^="system/"]').count() == 0
    assert page.locator('#charts .chart-card[data-title="loss"]').count() == 1
    assert page.locator("#system-head").is_visible()
    xs = page.evaluate(f"() => document.querySelector('{card}').plot.data[0]")
    assert xs == [r.t0 + 5.0 * i for i in range(40)]  # wall time, not the sample number
    page.select_option('select[aria-label="x axis"]', "relative")  # the training charts' axis only
    wait_plot(page, "u.scales.x.time === false", "#charts")
    assert page.evaluate(f"() => document.querySelector('{card}').plot.scales.x.time") is True


def test_a_chart_exports_the_points_it_draws_as_csv(
    page: Any, server: Server, runs: tuple[Path, Runs]
) -> None:
    _, r = runs
    page.goto(f"{server.url}/experiments/{r.ranks}#scalars")
    wait_plot(page, "u.data[0].length === 300")
    with page.expect_download() as download:
        page.locator(f"{CARD} .chart-csv").click()
    assert download.value.suggested_filename == "loss.csv"
    header, *rows = Path(download.value.path()).read_text().strip().splitlines()
    assert header == "step,worker 00,worker 01,worker 02"
    drawn = plot(page)
    assert len(rows) == 300
    assert [float(v) for v in rows[7].split(",")] == [drawn["x"][7], *(c[7] for c in drawn["cols"])]


def test_chart_search_and_collapsible_sections_on_the_scalars_tab(
    page: Any, server: Server, runs: tuple[Path, Runs]
) -> None:
    home, r = runs
    store = open_store(Settings(home=home))
    try:
        e = store.create_experiment(name="sections", project="charts")
        events = [
            Event(
                e.id,
                EventKind.SCALAR,
                {"points": [[title, "master", i, 1.0 / (i + 1), r.t0 + i] for i in range(20)]},
                "master",
                "master",
                0,
                0,
                r.t0,
                "sec",
                n,
            )
            for n, title in enumerate(["train/loss", "train/acc", "val/loss", "lr"])
        ]
        store.write_events(events)
    finally:
        store.close()
    page.goto(f"{server.url}/experiments/{e.id}#scalars")
    page.wait_for_function("() => document.querySelectorAll('#charts .chart-card').length === 4")
    sections = page.locator("#charts details.chart-section").evaluate_all(
        "ds => ds.map(d => d.dataset.section)"
    )
    assert sections == ["Charts", "train", "val"]  # by title prefix; a title without one in "Charts"

    def visible() -> list[str]:
        cards = page.locator("#charts .chart-card").all()
        return sorted(str(c.get_attribute("data-title")) for c in cards if c.is_visible())

    search = page.locator("#chart-search")
    search.fill("loss")
    assert (
        visible() == ["train/loss", "val/loss"]
        and page.locator("#chart-count").inner_text() == "2 of 4 charts"
    )
    assert page.locator('details[data-section="Charts"]').is_hidden()  # no match inside: the section hides
    search.fill("^val")  # a regular expression
    assert visible() == ["val/loss"]
    search.fill("")
    assert visible() == ["lr", "train/acc", "train/loss", "val/loss"]
    page.locator('details[data-section="train"] > summary').click()  # fold a section
    assert visible() == ["lr", "val/loss"]
    page.reload()  # folded it stays (remembered in the browser)
    page.wait_for_function("() => document.querySelectorAll('#charts .chart-card').length === 4")
    assert visible() == ["lr", "val/loss"]
    page.set_viewport_size({"width": 390, "height": 844})
    page.reload()
    page.wait_for_function("() => document.querySelectorAll('#charts .chart-card .uplot').length === 4")
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, f"the Scalars tab is {width} px wide on a 390 px screen"
    page.locator('details[data-section="train"] > summary').click()
    page.evaluate("() => localStorage.removeItem('phalanx.folded-sections')")


def test_the_dark_theme_follows_the_system_setting_charts_included(
    browser: Any, server: Server, runs: tuple[Path, Runs]
) -> None:
    _, r = runs
    context = browser.new_context(viewport={"width": 1200, "height": 900}, color_scheme="dark")
    try:
        pg = context.new_page()
        pg.set_default_timeout(30_000)
        pg.goto(f"{server.url}/experiments/{r.ranks}#scalars")
        wait_plot(pg, "u.data[0].length === 300")
        background = pg.evaluate("() => getComputedStyle(document.body).backgroundColor")
        card = pg.evaluate(f"() => getComputedStyle(document.querySelector('{CARD}')).backgroundColor")
        assert background == "rgb(15, 20, 27)" and card == "rgb(23, 29, 38)"  # dark page, dark cards
        axis = f"() => {{ const u = document.querySelector('{CARD}').plot; return u.axes[1].stroke(u, 1); }}"
        assert pg.evaluate(axis) == "#9aa4b2"  # the chart's labels in the dark theme's colour
        shot(pg, "charts-dark")
        builds = int(pg.locator(CARD).get_attribute("data-builds") or 0)
        pg.emulate_media(color_scheme="light")  # the system switches: the page and its charts follow
        pg.wait_for_function(
            "([sel, n]) => Number(document.querySelector(sel).dataset.builds) > n", arg=[CARD, builds]
        )
        assert pg.evaluate(axis) == "#667085"
        assert pg.evaluate("() => getComputedStyle(document.body).backgroundColor") == "rgb(246, 247, 249)"
        shot(pg, "charts-light-after-dark")
    finally:
        context.close()
