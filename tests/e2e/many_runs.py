"""Compare at many runs, measured in a real browser: what `bench/compare.py` reports and
`tests/e2e/test_compare_many.py` holds to the target (issue 40: Compare of 100 runs within 2x the
time of a light page).

``fill_runs`` writes N runs through the Store protocol as the ingester would (two ranks each, four
training titles, three system titles, a declared param that differs). ``measure`` opens, in
alternating rounds, the light page (one run's Scalars tab: the same charts for one run) and Compare
of every run, each until every chart it draws is ready, and counts the API requests each made.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from phalanx.config import Settings
from phalanx.domain import Event, EventKind
from phalanx.store import open_store
from tests.unit.server import fill

TITLES = ("acc", "loss", "lr", "val/loss")
SYSTEM = ("system/cpu_percent", "system/memory_mib", "system/gpu_util")
SERIES = ("master", "worker-0")
TARGET = 2.0  # Compare of 100 runs within this many times the light page (issue 40)


def fill_runs(home: Path, n: int = 100, points: int = 300) -> list[str]:
    """N finished runs in project "many" (ids oldest first), each of every title and series. Their
    events go to the store in one batch (one transaction, not two per run)."""
    store = open_store(Settings(home=home))
    ids = []
    events: list[Event] = []
    try:
        for i in range(n):
            e = fill.experiment(store, name=f"run-{i:03d}", project="many", n_workers=1)
            lr = {"section": "Declared", "key": "lr", "value": [0.1, 0.01, 0.001][i % 3]}
            events.append(fill.event(e.id, EventKind.PARAM, lr))
            t0 = 1_800_000_000.0 + 3600.0 * i
            rows: list[list[Any]] = []
            for rank, series in enumerate(SERIES):
                for title in TITLES + SYSTEM:
                    base = (i + 1) / n + rank * 0.1
                    rows += [[title, series, s, base / (s + 1), t0 + s] for s in range(points)]
            events.append(
                Event(e.id, EventKind.SCALAR, {"points": rows}, "master", "master", 0, 0, t0, "fill", 0)
            )
            ids.append(e.id)
        store.write_events(events)
    finally:
        store.close()
    return ids


@dataclass
class Timings:
    light: list[float] = field(default_factory=list)
    compare: list[float] = field(default_factory=list)
    light_requests: int = 0
    compare_requests: int = 0

    @property
    def ratio(self) -> float:
        """The median of each round's Compare time over its light page's."""
        return statistics.median(c / max(lt, 1e-9) for lt, c in zip(self.light, self.compare, strict=True))


def _open(browser: Any, url: str, ready: str) -> tuple[float, int]:
    """Seconds from navigation until ``ready`` (a JavaScript condition) holds, and API requests."""
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.set_default_timeout(300_000)
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url) if "/api/v1/" in r.url else None)
    try:
        t0 = time.perf_counter()
        page.goto(url)
        page.wait_for_function(ready, polling=50)
        return time.perf_counter() - t0, len(asked)
    finally:
        page.close()


def charts_ready(selector: str, n: int) -> str:
    return f"() => [...document.querySelectorAll('{selector}')].filter(c => c.dataset.ready).length === {n}"


def measure(browser: Any, url: str, ids: list[str], rounds: int) -> Timings:
    """Alternating rounds (light, Compare, light, Compare...): a load swing touches both alike."""
    out = Timings()
    light_url = f"{url}/experiments/{ids[0]}#scalars"
    compare_url = f"{url}/compare?ids={','.join(ids)}"
    for _ in range(rounds):
        took, asked = _open(browser, light_url, charts_ready("#charts .chart-card", len(TITLES)))
        out.light.append(took)
        out.light_requests = asked
        took, asked = _open(browser, compare_url, charts_ready("#compare-charts .chart-card", len(TITLES)))
        out.compare.append(took)
        out.compare_requests = asked
    return out
