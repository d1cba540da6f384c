"""Clone and enqueue from the web UI, in a real browser: an experiment submitted to a real `phalanx
server` is run again with another `lr` from its page ("Run again with…"); the server validates the
form's values before anything is queued (a refusal is shown in the form, nothing starts), and the
clone runs from the stored snapshot with the new value and links to its origin."""

from __future__ import annotations

import json
import shutil
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from phalanx.bundles import pack
from phalanx.cli.remote import Client
from tests.conftest import _processes_under
from tests.e2e.conftest import shot
from tests.integration.server.serverproc import Server, start_server, stop_server

DATA = Path(__file__).parent / "data" / "rerun"


def api(server: Server, path: str) -> Any:
    with urllib.request.urlopen(f"{server.url}/api/v1{path}", timeout=60) as r:
        return json.load(r)


def wait_done(server: Server, exp_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        exp = api(server, f"/experiments/{exp_id}")
        if exp["status"] in ("succeeded", "failed", "stopped"):
            return dict(exp)
        time.sleep(0.3)
    raise AssertionError(f"experiment {exp_id} did not end within 240 s")


def lr_reported(server: Server, exp_id: str) -> list[float]:
    series = api(server, f"/experiments/{exp_id}/metrics/lr")["series"]
    return [float(v) for s in series.values() for v in s["values"]]


@pytest.fixture
def server(phalanx_home: Path) -> Iterator[Server]:
    s = start_server(phalanx_home)
    try:
        yield s
        deadline = time.monotonic() + 120  # every supervisor has tidied up before the server goes
        while [pid for pid, _ in _processes_under(s.home) if pid != s.proc.pid]:
            assert time.monotonic() < deadline, "a supervisor did not exit within 120 s"
            time.sleep(0.1)
    finally:
        stop_server(s.proc)


def test_run_again_with_another_lr_from_the_experiment_page(
    page: Any, server: Server, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    shutil.copytree(DATA, project)
    origin = Client(server.url, None).submit(project / "exp.yml", pack(project), {}, 0)["id"]
    assert wait_done(server, origin)["status"] == "succeeded"
    assert lr_reported(server, origin) == [0.1]
    shutil.rmtree(project)  # the rerun runs the server's stored snapshot, not the submitter's folder

    page.goto(f"{server.url}/experiments/{origin}")
    page.click("#run-again")
    lr = page.locator('#rerun-form input[data-param="lr"]')
    assert lr.input_value() == "0.1"

    # a value the server refuses (a list that is not JSON): said in the form, nothing enqueued
    lr.fill("[0.05,")
    page.click("#rerun-submit")
    error = page.locator("#rerun-error")
    error.wait_for(state="visible")
    assert "list or mapping must be JSON" in error.inner_text()
    assert [e["id"] for e in api(server, "/experiments")["items"]] == [origin]

    lr.fill("0.05")
    page.fill("#rerun-priority", "3")
    page.click("#rerun-submit")
    page.wait_for_url(lambda url: "/experiments/" in url and origin not in url)
    clone = page.url.rsplit("/", 1)[-1].split("#")[0]
    link = page.locator("#rerun-of a")
    assert link.inner_text() == origin
    shot(page, "rerun-clone")

    assert wait_done(server, clone)["status"] == "succeeded"
    assert lr_reported(server, clone) == [0.05]
    launch = api(server, f"/experiments/{clone}")["plan"]["launch"]
    assert launch["rerun_of"] == origin and launch["params"] == {"lr": 0.05}
    link.click()
    page.wait_for_url(f"**/experiments/{origin}")
    assert page.locator("#rerun-of").count() == 0  # the origin is not a rerun itself

    # on a phone the form fits the screen
    page.set_viewport_size({"width": 390, "height": 844})
    page.click("#run-again")
    page.locator("#rerun-form").wait_for()
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, f"the experiment page with its form is {width} px wide on a 390 px screen"
