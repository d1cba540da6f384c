"""Compare of 100 runs in a real browser: a request per chart title, not per run, and within the
bench's target of 2x the time of a light page (one run's Scalars tab, the same charts for one run),
timed in alternating rounds so a load swing on the shared machine touches both alike
(tests/e2e/many_runs.py, bench/compare.py)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.many_runs import TARGET, TITLES, fill_runs, measure
from tests.integration.server.serverproc import Server

pytestmark = pytest.mark.browser

RUNS = 100


@pytest.fixture(scope="module")
def many(shared: Server) -> tuple[Server, list[str]]:
    return shared, fill_runs(shared.home, RUNS, points=100)


def test_compare_of_100_runs_asks_once_per_title_and_stays_near_2x_a_light_page(
    browser: Any, many: tuple[Server, list[str]]
) -> None:
    server, ids = many
    found = measure(browser, server.url, ids, rounds=3)
    # /me, /compare?ids=, one /metrics/TITLE?ids= per training title; the system titles wait
    # folded until opened (before: 100 experiments, 100 params, 100 title lists, 700 chart reads)
    assert found.compare_requests <= len(TITLES) + 2, found
    # the product's promise is TARGET (2x; bench/compare.py measures it, figures in README.md); a
    # timed bound in the suite is generous, as CI runs on two loaded cores: 1.5x the target
    assert found.ratio <= 1.5 * TARGET, found
