"""TensorBoard from the experiment page, in a real browser: the page's TensorBoard button starts the
experiment's board on the server and opens it at /services/ID/, where TensorBoard's own page shows
the experiment's run and its scalar tag (docs/services.md)."""

from __future__ import annotations

import re
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
