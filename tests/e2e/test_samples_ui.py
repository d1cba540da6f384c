"""The Debug samples tab in a real browser, over what a real script reported with Logger.report_image,
report_histogram and report_table (through the spool and ingest): the step slider shows the chosen
step's picture and bars, a table shows its rows, and the tab fits a phone."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.conftest import shot
from tests.integration.server.serverproc import Server, clean_env, start_server, stop_server

pytestmark = pytest.mark.browser

SCRIPT = """
import numpy as np
from phalanx import Task

task = Task.init(project_name="samples", task_name="debug-samples")
log = task.get_logger()
for step in range(3):
    pixels = np.zeros((6, 9, 3), dtype=np.uint8)
    pixels[:, :, step] = 200  # step 0 red, 1 green, 2 blue
    log.report_image("inputs", "digits", iteration=step, image=pixels)
    log.report_histogram("weights", "layer1", [step, step + 1, 2], iteration=step, xlabels=list("abc"))
log.report_table("results", "final", iteration=0, table_plot=[["name", "acc"], ["adam", 0.9], ["sgd", 0.8]])
assert task.flush(), task.flush_problems
print(task.id)
"""


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    home = tmp_path_factory.mktemp("samples-ui-home")
    script = home / "report.py"
    script.write_text(SCRIPT)
    done = subprocess.run(
        [sys.executable, str(script)], env=clean_env(home), capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stdout + done.stderr
    experiment = done.stdout.split()[-1]
    s = start_server(home)
    yield s, experiment
    stop_server(s.proc)


PIXEL = """async (img) => {
  await img.decode();
  const c = document.createElement("canvas");
  c.width = img.naturalWidth; c.height = img.naturalHeight;
  const g = c.getContext("2d");
  g.drawImage(img, 0, 0);
  return Array.from(g.getImageData(0, 0, 1, 1).data).slice(0, 3);
}"""


def _bars(page: Any) -> list[float]:
    bars = page.locator('.sample[data-title="weights"] svg.histogram rect.bar')
    return [float(bars.nth(i).get_attribute("data-value")) for i in range(bars.count())]


def test_the_slider_shows_the_chosen_steps_image_and_bars_and_tables_their_rows(
    page: Any, served: tuple[Server, str]
) -> None:
    server, experiment = served
    page.goto(f"{server.url}/experiments/{experiment}#samples")
    card = page.locator('.sample[data-title="inputs"][data-series="digits"]')
    image = card.locator('img[data-step="2"]')
    image.wait_for()  # the newest step first
    assert image.evaluate(PIXEL) == [0, 0, 200]
    card.locator("input.step-slider").fill("0")
    image = card.locator('img[data-step="0"]')
    image.wait_for()
    assert image.evaluate(PIXEL) == [200, 0, 0]
    assert "step 0" in card.inner_text() and "rank 0" in card.inner_text()

    histogram = page.locator('.sample[data-title="weights"]')
    histogram.locator('.sample-view[data-step="2"] rect.bar').first.wait_for()
    assert _bars(page) == [2.0, 3.0, 2.0]
    histogram.locator("input.step-slider").fill("1")
    histogram.locator('.sample-view[data-step="1"] rect.bar').first.wait_for()
    assert _bars(page) == [1.0, 2.0, 2.0]

    rows = page.locator('.sample[data-title="results"] table.report-table tbody tr')
    rows.first.wait_for()
    assert [rows.nth(i).inner_text().split() for i in range(rows.count())] == [
        ["adam", "0.9"],
        ["sgd", "0.8"],
    ]
    shot(page, "debug-samples")

    # the same reports over REST: kind=report, with their title, series, step and rank
    listed = json.loads(
        page.evaluate(
            f"fetch('/api/v1/experiments/{experiment}/artifacts?kind=report').then((r) => r.text())"
        )
    )
    steps = sorted(a["metadata"]["step"] for a in listed if a["metadata"]["title"] == "inputs")
    assert steps == [0, 1, 2] and {a["metadata"]["rank"] for a in listed} == {0}

    page.set_viewport_size({"width": 390, "height": 844})
    page.wait_for_function("document.documentElement.scrollWidth <= 390")
