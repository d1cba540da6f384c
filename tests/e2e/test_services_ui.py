"""TensorBoard from the experiment page, in a real browser: the page's TensorBoard button starts the
experiment's board on the server and opens it at /services/ID/, where TensorBoard's own page shows
the experiment's run and its scalar tag; the Services page lists it, and its Stop button stops it
(docs/services.md)."""

from __future__ import annotations

import json
import re
import urllib.request
from typing import Any

import pytest

from phalanx.config import Settings
from phalanx.services.boards import run_name
from phalanx.store import open_store
from tests.e2e.conftest import shot
from tests.integration.server.serverproc import Server
from tests.unit.server import fill

pytestmark = pytest.mark.browser


def test_the_tensorboard_button_opens_the_experiments_board_behind_the_server(
    page: Any, shared: Server
) -> None:
    store = open_store(Settings(home=shared.home))
    try:
        e = fill.experiment(store, name="boarded", project="boards")
        fill.scalars(store, e.id, "loss", "train", [1.0, 0.6, 0.4, 0.3])
    finally:
        store.close()
    page.goto(f"{shared.url}/experiments/{e.id}")
    page.click("button#tensorboard")
    page.wait_for_url(re.compile(rf"{re.escape(shared.url)}/services/[0-9a-f]+/"), timeout=120_000)
    page.get_by_text(run_name(e)).first.wait_for(timeout=120_000)  # TensorBoard's run list
    page.get_by_text("loss/train").first.wait_for(timeout=120_000)  # its scalar card
    shot(page, "30-tensorboard")
    found = re.search(r"/services/([0-9a-f]+)/", page.url)
    assert found, page.url
    service_id = found.group(1)

    page.goto(f"{shared.url}/services")
    row = page.locator(f'#services tr[data-id="{service_id}"]')
    row.wait_for()
    assert "tensorboard" in row.inner_text() and f"experiment {e.id[:8]}" in row.inner_text()
    shot(page, "31-services")
    page.once("dialog", lambda dialog: dialog.accept())
    row.locator("button:has-text('Stop')").click()
    row.wait_for(state="detached")
    with urllib.request.urlopen(f"{shared.url}/api/v1/services", timeout=60) as answer:
        assert service_id not in [s["id"] for s in json.load(answer)]
