"""The Queue page: what holds this machine, what waits in order and why, and stopping a waiting run."""

from __future__ import annotations

import json
import os
import urllib.request
from typing import Any

import pytest

from phalanx.config import Settings
from phalanx.domain import ExperimentStatus
from phalanx.machine.ledger import Capacity, Need
from phalanx.queue import ledger_for
from phalanx.store import open_store
from tests.e2e.conftest import shot
from tests.integration.server.serverproc import Server
from tests.unit.server import fill

pytestmark = pytest.mark.browser

HUGE = Capacity(cpus=tuple(range(4096)), gpus=(), memory_mib=1e9)


@pytest.fixture(scope="module")
def queued(shared: Server) -> tuple[Server, str, str]:
    home = shared.home
    store = open_store(Settings(home=home))
    try:
        holder = fill.experiment(store, name="holder", status=ExperimentStatus.RUNNING)
        waiter = fill.experiment(store, name="waiter", status=ExperimentStatus.QUEUED)
    finally:
        store.close()
    ledger = ledger_for(Settings(home=home))
    me = os.getpid()  # a live owner, as each entry's `phalanx run` is
    ledger.admit(holder.id, Need(cpus=4096), HUGE, pid=me, name="holder")
    ledger.admit(waiter.id, Need(cpus=1), HUGE, pid=me, name="waiter")
    return shared, holder.id, waiter.id


def test_the_queue_page_says_why_a_run_waits_and_stops_it(page: Any, queued: tuple[Server, str, str]) -> None:
    server, holder, waiter = queued
    page.goto(f"{server.url}/")
    page.click(".topbar nav a[data-nav=queue]")
    page.locator(f'#queue-running tr[data-id="{holder}"]').wait_for()
    row = page.locator(f'#queue-waiting tr[data-id="{waiter}"]')
    assert row.locator("td.why").inner_text() == "waits for 1 core (0 free)"
    assert row.locator("td").nth(4).inner_text() == "1 core"  # what it needs, in the singular
    held = page.locator(f'#queue-running tr[data-id="{holder}"] td').nth(3).inner_text()
    assert held == f"{4096:,} cores"
    assert page.locator(".topbar nav a.active").inner_text() == "Queue"
    shot(page, "60-queue")
    page.once("dialog", lambda d: d.accept())
    with page.expect_response(lambda r: r.url.endswith(f"/experiments/{waiter}/stop")) as stopped:
        row.locator("button", has_text="Stop").click()
    assert stopped.value.status == 200
    with urllib.request.urlopen(f"{server.url}/api/v1/experiments/{waiter}", timeout=30) as r:
        assert json.load(r)["status"] == "stopped"
