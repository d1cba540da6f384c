"""The Alerts page in a real browser: a hook added with its form (its secret shown once) is told of
the project's failed experiment by the server, its delivery log shows what was sent, about which
experiment, and the receiver's answer, and its Remove button removes it (docs/alerts.md)."""

from __future__ import annotations

import json
import time
import urllib.request
from typing import Any

import pytest

from phalanx.config import Settings
from phalanx.domain import ExperimentStatus
from phalanx.store import open_store
from tests.e2e.conftest import shot
from tests.integration.server.serverproc import Server
from tests.support.webhooks import Receiver
from tests.unit.server import fill

pytestmark = pytest.mark.browser


def test_a_hook_added_on_the_alerts_page_shows_what_it_was_sent_and_can_be_removed(
    page: Any, shared: Server
) -> None:
    with Receiver() as receiver:
        page.goto(f"{shared.url}/alerts")
        page.fill("#alert-project", "alerting")
        page.fill("#alert-url", receiver.url)
        page.fill("#alert-events", "failed, stopped")
        page.click("#add-alert")
        secret = page.locator("#alert-secret code")
        secret.wait_for()
        row = page.locator("#alerts tr[data-id]", has_text=receiver.url)
        row.wait_for()
        assert "alerting" in row.inner_text() and "failed, stopped" in row.inner_text()
        hook_id = row.get_attribute("data-id")

        store = open_store(Settings(home=shared.home))
        try:
            e = fill.experiment(store, name="doomed", project="alerting", status=ExperimentStatus.RUNNING)
            store.update_experiment(e.id, status=ExperimentStatus.FAILED, reason="exited with code 3",
                                    finished_at=time.time())  # fmt: skip
        finally:
            store.close()
        (got,) = receiver.wait_for(1)
    assert got.signed_by(secret.inner_text())  # the secret the page showed is the hook's
    assert json.loads(got.body)["experiment_id"] == e.id

    row.locator("button.deliveries-toggle").click()
    delivered = page.locator(f'tr.deliveries-row[data-hook="{hook_id}"] tr[data-state="delivered"]')
    delivered.wait_for(timeout=60_000)  # the page refreshes every 5 s until the delivery is settled
    text = delivered.inner_text()
    assert "experiment.failed" in text and f"experiment {e.id[:8]}" in text and "HTTP 200" in text
    assert delivered.locator("a").get_attribute("href") == f"/experiments/{e.id}"
    shot(page, "32-alerts")

    page.once("dialog", lambda dialog: dialog.accept())
    row.locator("button:has-text('Remove')").click()
    row.wait_for(state="detached")
    with urllib.request.urlopen(f"{shared.url}/api/v1/alerts", timeout=60) as answer:
        assert hook_id not in [h["id"] for h in json.load(answer)]
