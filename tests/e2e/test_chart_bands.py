"""Aggregated lines draw what they claim: the mean of a run's ranks with a min–max band on Scalars,
and per value of a param on Compare. The plotted arrays (``card.plot``) are checked against the
points the API returns."""

from __future__ import annotations

import json
import math
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

CARD = '.chart-card[data-title="loss"]'
STEPS = 120
TAGS: list[tuple[str, ...]] = [("baseline",), ("baseline",), (), ()]


@dataclass
class Runs:
    ranks: str  # three ranks; the third reports every other step only
    runs: dict[str, str]  # four runs of one series, id -> their optimizer


def experiment(
    home: Path,
    name: str,
    series: dict[str, list[tuple[int, float]]],
    params: dict[str, str],
    tags: tuple[str, ...] = (),
) -> str:
    store = open_store(Settings(home=home))
    t0 = float(int(time.time()) - 3600)
    try:
        e = store.create_experiment(
            name=name,
            project="bands",
            replicas=[Replica("", "master", Role.MASTER, 0, 0)],
            framework="pytorch",
            tags=tags,
        )
        events = [
            Event(
                e.id,
                EventKind.PARAM,
                {"section": "General", "key": k, "value": v},
                "master",
                "master",
                0,
                0,
                t0,
                "p",
                i,
            )
            for i, (k, v) in enumerate(params.items())
        ]
        for w, (label, pts) in enumerate(series.items()):
            data = {"points": [["loss", label, s, v, t0 + s] for s, v in pts]}
            events.append(Event(e.id, EventKind.SCALAR, data, "master", "master", 0, 0, t0, "c", 100 + w))
        store.write_events(events)
        store.update_experiment(
            e.id, status=ExperimentStatus.SUCCEEDED, started_at=t0, finished_at=t0 + STEPS
        )
        return e.id
    finally:
        store.close()


def curve(k: int, steps: range) -> list[tuple[int, float]]:
    return [(s, 1.0 / (s + 1) + 0.1 * math.sin(0.3 * s + k)) for s in steps]


@pytest.fixture(scope="module")
def runs(shared: Server) -> tuple[Path, Runs]:
    home = shared.home
    ranks = experiment(
        home,
        "three ranks",
        {
            "rank 0": curve(0, range(STEPS)),
            "rank 1": curve(1, range(STEPS)),
            "rank 2": curve(2, range(0, STEPS, 2)),
        },
        {},
    )
    optimizers = ["adam", "sgd", "adam", "sgd"]
    by_id = {
        # runs 0 and 1 tagged "baseline", 2 and 3 not tagged
        experiment(home, f"run {k}", {"loss": curve(3 + k, range(60))}, {"optimizer": o}, TAGS[k]): o
        for k, o in enumerate(optimizers)
    }
    return home, Runs(ranks, by_id)


@pytest.fixture(scope="module")
def server(shared: Server, runs: tuple[Path, Runs]) -> Server:
    return shared


def points(server: Server, exp: str, **window: float) -> dict[str, dict[int, float]]:
    """Each series' step -> value, as the charts get them (the compact form, decoded)."""
    q = urllib.parse.urlencode({"max_points": 2000, "format": "compact", **window})
    with urllib.request.urlopen(f"{server.url}/api/v1/experiments/{exp}/metrics/loss?{q}", timeout=30) as r:
        series = decode(json.load(r))
    return {name: dict(zip(s["steps"], s["values"], strict=True)) for name, s in series.items()}


def at(series: dict[int, float], x: int) -> float | None:
    """The series' value at x: its own point, or interpolated between its neighbours (as the UI)."""
    if x in series:
        return series[x]
    below = [s for s in series if s < x]
    above = [s for s in series if s > x]
    if not below or not above:
        return None
    x0, x1 = max(below), min(above)
    y0, y1 = series[x0], series[x1]
    return y0 + ((y1 - y0) * (x - x0)) / (x1 - x0)


def expected_band(members: list[dict[int, float]]) -> tuple[list[int], list[float], list[float], list[float]]:
    xs = sorted({x for m in members for x in m})
    mean, lo, hi = [], [], []
    for x in xs:
        vals = [v for v in (at(m, x) for m in members) if v is not None]
        mean.append(sum(vals) / len(vals))
        lo.append(min(vals))
        hi.append(max(vals))
    return xs, mean, lo, hi


def drawn(page: Any, root: str) -> Any:
    return page.evaluate(
        """sel => { const u = document.querySelector(sel).plot;
          return { x: u.data[0], cols: u.data.slice(1), labels: u.series.slice(1).map(s => s.label),
                   bands: u.bands.map(b => b.series) }; }""",
        f"{root} {CARD}",
    )


def test_a_runs_ranks_as_their_mean_and_min_max_band(
    page: Any, server: Server, runs: tuple[Path, Runs]
) -> None:
    _, r = runs
    page.goto(f"{server.url}/experiments/{r.ranks}#scalars")
    page.wait_for_function(f"() => document.querySelector('{CARD}')?.plot?.series.length === 4")
    assert drawn(page, "")["labels"] == ["rank 0", "rank 1", "rank 2"]  # each rank, by default
    page.select_option('select[aria-label="lines"]', "ranks")
    page.wait_for_function(f"() => document.querySelector('{CARD}').plot.bands.length === 1")
    got = drawn(page, "")
    assert got["labels"] == ["ranks · mean of 3", "ranks · max", "ranks · min"]
    assert got["bands"] == [[2, 3]]  # filled from the max line down to the min line
    sent = points(server, r.ranks)
    xs, mean, lo, hi = expected_band([sent["rank 0"], sent["rank 1"], sent["rank 2"]])
    assert got["x"] == xs == list(range(STEPS))
    assert got["cols"][0] == pytest.approx(mean, rel=1e-12)
    assert got["cols"][1] == pytest.approx(hi, rel=1e-12)
    assert got["cols"][2] == pytest.approx(lo, rel=1e-12)
    # rank 2 has no odd steps: there it is interpolated, not left out of the mean
    assert got["cols"][0][7] != pytest.approx((sent["rank 0"][7] + sent["rank 1"][7]) / 2)
    shot(page, "40-rank-band")
    # a drag-zoom keeps the band: the window's points, aggregated the same way
    chart = page.locator(CARD)
    over = chart.locator(".u-over").bounding_box()
    mid = over["y"] + over["height"] / 2
    page.mouse.move(over["x"] + over["width"] * 0.2, mid)
    page.mouse.down()
    page.mouse.move(over["x"] + over["width"] * 0.5, mid, steps=5)
    page.mouse.up()
    page.locator(f'{CARD}[data-detail="true"]').wait_for()
    lo, hi = (float(v) for v in str(chart.get_attribute("data-zoom")).split(","))
    flo, fhi = (float(v) for v in str(chart.get_attribute("data-fetched")).split(","))
    assert flo < lo and fhi > hi  # a margin, so each rank has its neighbours at the view's edges
    zoomed = drawn(page, "")
    assert zoomed["labels"] == got["labels"] and zoomed["bands"] == [[2, 3]]
    window = points(server, r.ranks, x_min=flo, x_max=fhi)
    wxs, wmean, wlo, whi = expected_band([window["rank 0"], window["rank 1"], window["rank 2"]])
    assert zoomed["x"] == wxs
    assert zoomed["cols"][0] == pytest.approx(wmean, rel=1e-12)
    assert zoomed["cols"][1] == pytest.approx(whi, rel=1e-12)
    assert zoomed["cols"][2] == pytest.approx(wlo, rel=1e-12)
    inside = [k for k, x in enumerate(zoomed["x"]) if lo <= x <= hi]
    assert len(inside) > 10
    # in view, the same mean as the whole chart's (to the compact form's rounding): all three ranks
    # count at the edges too
    assert [zoomed["cols"][0][k] for k in inside] == pytest.approx(
        [mean[xs.index(zoomed["x"][k])] for k in inside], rel=1e-5
    )
    chart.locator(".u-over").dblclick()
    page.select_option('select[aria-label="lines"]', "each")
    page.wait_for_function(f"() => document.querySelector('{CARD}').plot.series.length === 4")
    assert drawn(page, "")["bands"] == []


def test_compare_groups_runs_by_a_param_into_bands(
    page: Any, server: Server, runs: tuple[Path, Runs]
) -> None:
    _, r = runs
    page.goto(f"{server.url}/compare?ids={','.join(r.runs)}")
    root = "#compare-charts"
    page.wait_for_function(f"() => document.querySelector('{root} {CARD}')?.plot?.series.length === 5")
    page.select_option('select[aria-label="lines"]', "param:optimizer")
    page.wait_for_function(f"() => document.querySelector('{root} {CARD}')?.plot?.bands.length === 2")
    got = drawn(page, root)
    assert len(got["cols"]) == 6
    for value in ("adam", "sgd"):
        members = [points(server, exp)["loss"] for exp, o in r.runs.items() if o == value]
        xs, mean, lo, hi = expected_band(members)
        i = next(k for k, label in enumerate(got["labels"]) if value in label and "mean of 2" in label)
        assert got["labels"][i + 1].endswith("· max") and got["labels"][i + 2].endswith("· min")
        assert [i + 2, i + 3] in got["bands"]
        assert got["x"] == xs  # the runs share their steps
        assert got["cols"][i] == pytest.approx(mean, rel=1e-12)
        assert got["cols"][i + 1] == pytest.approx(hi, rel=1e-12)
        assert got["cols"][i + 2] == pytest.approx(lo, rel=1e-12)
    shot(page, "41-group-by-param")
    # grouped by tags instead: runs 0 and 1 ("baseline") against 2 and 3 (no tags)
    page.select_option('select[aria-label="lines"]', "tags")
    page.wait_for_function(
        "sel => document.querySelector(sel).plot.series.some(s => s.label.startsWith('tags: baseline'))",
        arg=f"{root} {CARD}",
    )
    got = drawn(page, root)
    ids = list(r.runs)
    for label, members in (("tags: baseline", ids[:2]), ("tags: no tags", ids[2:])):
        xs, mean, lo, hi = expected_band([points(server, exp)["loss"] for exp in members])
        i = got["labels"].index(f"{label} · mean of 2")
        assert [i + 2, i + 3] in got["bands"]
        assert got["cols"][i] == pytest.approx(mean, rel=1e-12)
        assert got["cols"][i + 1] == pytest.approx(hi, rel=1e-12)
        assert got["cols"][i + 2] == pytest.approx(lo, rel=1e-12)
