"""The web UI in a real browser, against a real `phalanx server` over a store holding two runs of seed
003's example as `phalanx run` records them (tests/e2e/fill.py writes them in-process), and two real
`phalanx run`s for what follows a running experiment and stops one."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import shot
from tests.e2e.fill import Filled, fill_with_runs
from tests.integration.server.serverproc import PHALANX, Server, clean_env, start_server, stop_server

pytestmark = pytest.mark.browser


@pytest.fixture(scope="session")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Filled:
    return fill_with_runs(tmp_path_factory.mktemp("ui-home"))


@pytest.fixture(scope="session")
def server(filled: Filled) -> Iterator[Server]:
    s = start_server(filled.home)
    yield s
    stop_server(s.proc)


def api(server: Server, path: str) -> Any:
    with urllib.request.urlopen(f"{server.url}/api/v1{path}", timeout=30) as r:
        return json.load(r)


def until(server: Server, path: str, ok: Callable[[Any], bool]) -> None:
    """Returns once the API's answer at ``path`` is ``ok``: asked every 0.1 s, 900 times at most (the
    90 s the page was given to show it)."""
    for _ in range(900):
        if ok(api(server, path)):
            return
        time.sleep(0.1)
    raise AssertionError(f"{path} never answered what the test waits for")


def refresh_once(page: Any, server: Server, path: str, ok: Callable[[Any], bool], ms: int = 3_000) -> None:
    """A page refreshes itself on a timer: the list every 10 s while nothing on it runs (3 s when
    something does), a running experiment's page every 3 s. Once the API says what the page is to
    show, the page's clock (installed before it opened) is moved on by ``ms``: its own refresh fires
    then instead of up to that long later."""
    until(server, path, ok)
    page.clock.fast_forward(ms)


def running(name: str) -> Callable[[Any], bool]:
    return lambda page: any(e["name"] == name and e["status"] == "running" for e in page["items"])


def replica_runs(name: str) -> Callable[[Any], bool]:
    return lambda exp: any(r["name"] == name and r["state"] == "running" for r in exp["replicas"])


def test_the_list_shows_every_experiment_with_its_topology(page: Any, server: Server, filled: Filled) -> None:
    page.goto(server.url + "/")
    rows = page.locator("#experiments tbody tr[data-id]")
    rows.first.wait_for()
    ids = {rows.nth(i).get_attribute("data-id") for i in range(rows.count())}
    assert {filled.first, filled.second} <= ids
    first = page.locator(f'tr[data-id="{filled.first}"]')
    assert first.locator("td.topology").inner_text() == filled.topology_text
    # a plain table cell (the overview's topology styles once made it a flex box, breaking the row)
    assert first.locator("td.topology").evaluate("td => getComputedStyle(td).display") == "table-cell"
    assert first.locator(".badge").inner_text() == "succeeded"
    shot(page, "01-experiments")


def test_the_list_filters_by_text(page: Any, server: Server, filled: Filled) -> None:
    page.goto(server.url + "/")
    page.locator("#experiments tbody tr[data-id]").first.wait_for()
    page.fill('input[aria-label="search"]', filled.first)
    page.wait_for_function(
        "id => [...document.querySelectorAll('#experiments tbody tr[data-id]')]"
        ".map(r => r.dataset.id).join() === id",
        arg=filled.first,
    )


def test_the_experiment_page_shows_one_loss_chart_with_a_series_per_worker(
    page: Any, server: Server, filled: Filled
) -> None:
    page.goto(f"{server.url}/experiments/{filled.first}")
    page.locator("#topology .replica").first.wait_for()
    for name in filled.replicas:
        assert page.locator(f'#topology .replica[data-replica="{name}"]').count() == 1
    shot(page, "02-overview")
    page.click('a[data-tab="scalars"]')
    chart = page.locator('.chart-card[data-title="loss"]')
    chart.locator("canvas").wait_for()
    assert page.locator('.chart-card[data-title="loss"]').count() == 1
    labels = chart.locator(".u-legend .u-series .u-label").all_inner_texts()
    assert sorted(labels[1:]) == sorted(filled.loss_series)  # the first label is the x axis
    # Not hovering: the legend shows each line's last value, not a dash.
    values = chart.locator(".u-legend .u-series .u-value").all_inner_texts()
    assert values[0] == "last" and all(re.fullmatch(r"-?[\d.e+-]+", v) for v in values[1:]), values
    shot(page, "03-scalars")


def test_the_experiment_page_shows_every_artifact_with_a_preview(
    page: Any, server: Server, filled: Filled
) -> None:
    page.goto(f"{server.url}/experiments/{filled.first}#artifacts")
    page.locator("#artifacts tbody tr").first.wait_for()
    names = page.locator("#artifacts tbody tr").evaluate_all("rows => rows.map(r => r.dataset.name)")
    assert set(filled.artifacts) <= set(names)
    page.click(f'#artifacts tr[data-name="{filled.artifacts[-1]}"]')
    page.wait_for_function(
        "() => document.querySelector('#artifact-preview pre')?.textContent.includes('worker_rank')"
    )
    shot(page, "04-artifacts")


def test_the_experiment_page_shows_each_ranks_hyperparameters(
    page: Any, server: Server, filled: Filled
) -> None:
    page.goto(f"{server.url}/experiments/{filled.first}#hyperparameters")
    page.locator('table[data-section="General"]').wait_for()
    for key, replica in filled.general_params.items():
        row = page.locator(f'table[data-section="General"] tr[data-key="{key}"]')
        assert row.count() == 1, key
        assert row.get_attribute("data-replica") == replica
    assert page.locator('table[data-section="Args"] tr[data-key]').count() > 0
    shot(page, "05-hyperparameters")


def test_the_console_shows_lines_from_every_rank_and_searches(
    page: Any, server: Server, filled: Filled
) -> None:
    page.goto(f"{server.url}/experiments/{filled.first}#console")
    for replica in filled.console_replicas:
        page.locator(f'#console .line[data-replica="{replica}"]').first.wait_for()
    shot(page, "06-console")
    needle = filled.console_needle
    page.fill('input[aria-label="search console"]', needle)
    page.wait_for_function(
        "n => { const l = [...document.querySelectorAll('#console .line')];"
        " return l.length > 0 && l.every(x => x.textContent.toLowerCase().includes(n.toLowerCase())); }",
        arg=needle,
    )
    page.get_by_text(re.compile(r"^\d+ of \d+ lines$")).wait_for()  # the count says it is filtered
    page.fill('input[aria-label="search console"]', "no-such-text-anywhere")
    page.locator("#console .no-match").wait_for()
    assert page.get_by_text(re.compile(r"^0 of \d+ lines$")).is_visible()
    page.fill('input[aria-label="search console"]', needle)
    page.click(f'#replica-chips button[data-replica="{filled.console_replicas[-1]}"]')
    page.wait_for_function(
        "r => { const l = [...document.querySelectorAll('#console .line')];"
        " return l.length > 0 && l.every(x => x.dataset.replica === r); }",
        arg=filled.console_replicas[-1],
    )


def test_compare_overlays_scalars_and_marks_differing_hyperparameters(
    page: Any, server: Server, filled: Filled
) -> None:
    page.goto(f"{server.url}/compare?ids={filled.first},{filled.second}")
    page.locator("#compare-charts .chart-card canvas").first.wait_for()
    assert page.locator(".cmp-heads .card").count() == 2
    loss = page.locator('#compare-charts .chart-card[data-title="loss"]')
    labels = loss.locator(".u-legend .u-series .u-label").all_inner_texts()[1:]
    assert any(filled.first[:6] in t for t in labels) and any(filled.second[:6] in t for t in labels)
    page.locator("#compare-params-table tr.differs").first.wait_for()
    differing = page.locator("#compare-params-table tr.differs").evaluate_all(
        "rows => rows.map(r => r.dataset.key)"
    )
    assert filled.differing_param in differing
    heads = page.locator("#compare-params-table th.exp-col").all_inner_texts()
    assert any(filled.first[:6] in t for t in heads), heads  # ids as they are, not upper-cased
    shot(page, "07-compare")
    page.select_option('select[aria-label="x axis"]', "relative")  # runs that started apart line up
    page.locator(
        '#compare-charts .chart-card[data-title="loss"] .u-legend .u-series .u-label', has_text="seconds"
    ).wait_for()


def test_compare_picker_leads_to_the_comparison(page: Any, server: Server, filled: Filled) -> None:
    page.goto(f"{server.url}/")
    page.locator("#experiments tbody tr[data-id]").first.wait_for()
    page.check(f'tr[data-id="{filled.first}"] input[type=checkbox]')
    page.check(f'tr[data-id="{filled.second}"] input[type=checkbox]')
    page.click("text=Compare (2)")
    page.wait_for_url(re.compile(r"/compare\?ids="))
    page.locator(".cmp-heads .card").nth(1).wait_for()


def test_a_token_protected_server_shows_the_login_page_first(
    page: Any, filled: Filled, tmp_path: Path
) -> None:
    secured = start_server(filled.home, token="e2e-secret-token")
    try:
        page.goto(f"{secured.url}/experiments/{filled.first}#console")  # the tab survives signing in
        page.locator('input[name="token"]').wait_for()
        assert "/login" in page.url
        shot(page, "08-login")
        page.fill('input[name="token"]', "wrong")
        page.click("button[type=submit]")
        page.locator("p.error").wait_for()
        page.fill('input[name="token"]', "e2e-secret-token")
        page.click("button[type=submit]")
        page.locator("#console .line").first.wait_for()
        assert page.url.endswith(f"/experiments/{filled.first}#console")
        # Log out (top right) is a same-origin POST: it signs out for real
        page.click("form.logout button")
        page.locator('input[name="token"]').wait_for()
        page.goto(f"{secured.url}/experiments/{filled.first}")
        page.locator('input[name="token"]').wait_for()
        # a typed (or linked) /logout only shows the button; the session ends when it is pressed
        page.fill('input[name="token"]', "e2e-secret-token")
        page.click("button[type=submit]")
        page.locator(".topbar form.logout").wait_for()
        page.goto(f"{secured.url}/logout")
        page.goto(f"{secured.url}/")
        page.locator(".topbar form.logout").wait_for()  # still signed in
        page.goto(f"{secured.url}/logout")
        page.click("button[type=submit]")
        page.locator('input[name="token"]').wait_for()
        assert "/login" in page.url
    finally:
        stop_server(secured.proc)


def test_the_list_console_and_header_follow_a_running_experiment(
    page: Any, server: Server, filled: Filled, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    run = subprocess.Popen(
        [
            str(PHALANX),
            "run",
            "-f",
            str(Path(__file__).parent / "data" / "ticker.yml"),
            "--param",
            f"release={release}",
        ],
        env=clean_env(filled.home),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        page.clock.install()
        page.goto(f"{server.url}/")
        page.get_by_text(re.compile(r"^\d+ experiments?$")).wait_for()  # loaded: its refresh is due
        refresh_once(page, server, "/experiments?q=ticker", running("ticker"), ms=10_000)
        row = page.locator("#experiments tbody tr[data-id]").filter(has_text="ticker")
        row.locator('.badge[data-status="running"]').wait_for(timeout=90_000)  # the list refreshes itself
        exp = row.get_attribute("data-id")
        row.locator("a").first.click()
        page.click('a[data-tab="console"]')
        for replica in ("master", "worker-0"):
            page.locator("#console .line", has_text=f"tick 4 from {replica}").wait_for(timeout=90_000)
        assert page.locator("#console .line", has_text="released").count() == 0
        assert page.locator('.exp-head .badge[data-status="running"]').count() == 1
        release.touch()
        for replica in ("master", "worker-0"):
            page.locator("#console .line", has_text=f"released {replica}").wait_for(timeout=90_000)
        refresh_once(page, server, f"/experiments/{exp}", lambda e: e["status"] == "succeeded")
        page.locator('.exp-head .badge[data-status="succeeded"]').wait_for(timeout=90_000)
        assert run.wait(timeout=60) == 0
        texts = page.locator('#console .line[data-replica="master"] .text').all_inner_texts()
        assert texts == [f"tick {i} from master" for i in range(5)] + [
            "released master"
        ]  # each once, in order
        shot(page, "10-live-console")
    finally:
        release.touch()
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()


def test_the_stop_button_stops_a_running_experiment(page: Any, server: Server, filled: Filled) -> None:
    run = subprocess.Popen(
        [str(PHALANX), "run", "-f", str(Path(__file__).parent / "data" / "sleepy.yml"), "-o", "json"],
        env=clean_env(filled.home),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        page.clock.install()
        page.goto(f"{server.url}/?q=sleepy")
        page.get_by_text(re.compile(r"^\d+ experiments?$")).wait_for()  # loaded: its refresh is due
        refresh_once(page, server, "/experiments?q=sleepy", running("sleepy"), ms=10_000)
        row = page.locator("#experiments tbody tr[data-id]").filter(has_text="sleepy")
        row.locator('.badge[data-status="running"]').wait_for(timeout=90_000)
        exp = row.get_attribute("data-id")
        page.goto(f"{server.url}/experiments/{exp}")
        page.locator(".exp-head .badge").wait_for()  # loaded: its refresh is due
        refresh_once(page, server, f"/experiments/{exp}", replica_runs("worker-0"))
        page.locator('#topology .replica.running[data-replica="worker-0"]').wait_for(timeout=90_000)
        page.once("dialog", lambda dialog: dialog.accept())
        page.click("button:has-text('Stop')")
        refresh_once(page, server, f"/experiments/{exp}", lambda e: e["status"] == "stopped")
        page.locator('.exp-head .badge[data-status="stopped"]').wait_for(timeout=90_000)
        out, _ = run.communicate(timeout=90)
        assert run.returncode == 130 and json.loads(out)["status"] == "stopped"
        page.locator("button:has-text('Delete')").wait_for()
        shot(page, "11-stopped")
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()


def test_the_models_tab_lists_saved_models_with_a_download(page: Any, server: Server, filled: Filled) -> None:
    from phalanx.config import Settings
    from phalanx.domain import Event, EventKind
    from phalanx.store import open_store

    store = open_store(Settings(home=filled.home))
    assert store.artifact_store is not None
    data = b"\x08\x07fake-onnx-bytes"
    store.artifact_store.put_bytes(filled.first, "models/mlp.onnx", data)
    meta = {
        "exporter": "dynamo",
        "opset": 20,
        "check": {"passed": True, "max_abs_diff": 2e-6, "runtime": "onnxruntime"},
    }
    store.write_events(
        [
            Event(
                filled.first,
                EventKind.MODEL,
                {
                    "name": "mlp.onnx",
                    "format": "onnx",
                    "path": "models/mlp.onnx",
                    "size": len(data),
                    "metadata": meta,
                },
                "master",
                "master",
                0,
                0,
                1.0,
                "e2e-models",
                0,
            )
        ]
    )
    store.close()
    page.goto(f"{server.url}/experiments/{filled.first}#models")
    row = page.locator('#models tr[data-name="mlp.onnx"]')
    row.wait_for()
    assert "opset: 20" in row.inner_text()
    with page.expect_download() as download:
        row.locator("a", has_text="download").click()
    assert Path(download.value.path()).read_bytes() == data
    shot(page, "12-models")


def test_on_a_phone_no_page_is_wider_than_the_screen(browser: Any, server: Server, filled: Filled) -> None:
    context = browser.new_context(viewport={"width": 390, "height": 844})
    try:
        pg = context.new_page()
        pg.set_default_timeout(30_000)
        base = f"{server.url}/experiments/{filled.first}"
        for url, ready in [
            (f"{server.url}/", "table.grid tbody tr"),
            (f"{base}#overview", "#topology .replica"),
            (f"{base}#scalars", ".chart-card canvas"),
            (f"{base}#artifacts", "#artifact-preview"),
            (f"{base}#console", "#console .line"),
            (f"{server.url}/compare?ids={filled.first},{filled.second}", ".chart-card canvas"),
        ]:
            pg.goto(url)
            pg.locator(ready).first.wait_for()
            width = pg.evaluate("document.documentElement.scrollWidth")
            assert width <= 390, f"{url} is {width} px wide on a 390 px screen"
        shot(pg, "13-phone-compare")
    finally:
        context.close()


def test_a_finished_experiment_without_reports_says_how_to_report_and_shows_many_workers(
    page: Any, server: Server, filled: Filled
) -> None:
    from phalanx.config import Settings
    from phalanx.store import open_store
    from tests.unit.server import fill

    store = open_store(Settings(home=filled.home))
    e = fill.experiment(store, name="silent", n_workers=12)
    store.close()
    page.goto(f"{server.url}/experiments/{e.id}#overview")
    page.locator('#topology .replica[data-replica="worker-11"]').wait_for()
    label = page.locator('#topology .role-row[data-role="worker"] .role-label').bounding_box()
    for box in page.locator('#topology .role-row[data-role="worker"] .replica').all():
        assert box.bounding_box()["x"] >= label["x"] + label["width"]  # wrapped rows stay right of it
    page.click('a[data-tab="scalars"]')
    page.locator("text=reported no scalars").wait_for()
    assert "report_scalar" in page.locator("#panel").inner_text()
    assert not page.locator("#panel .toolbar").is_visible()  # no chart controls without charts
    page.click('a[data-tab="artifacts"]')
    page.locator("text=task.upload_artifact").wait_for()
    page.click('a[data-tab="hyperparameters"]')
    page.locator("text=task.connect").wait_for()


def test_scrolling_the_console_up_stops_following_and_the_bottom_follows_again(
    page: Any, server: Server, filled: Filled
) -> None:
    from phalanx.config import Settings
    from phalanx.store import open_store
    from tests.unit.server import fill

    store = open_store(Settings(home=filled.home))
    e = fill.experiment(store, name="chatty")
    fill.log_lines(store, e.id, "master", [f"line {i}" for i in range(300)])
    store.close()
    page.goto(f"{server.url}/experiments/{e.id}#console")
    page.locator("#console .line", has_text="line 299").wait_for()
    follow = page.locator("#follow")
    assert follow.is_checked()
    page.locator("#console").evaluate("c => { c.scrollTop = 0; }")
    page.wait_for_function("() => !document.getElementById('follow').checked")
    page.locator("#console").evaluate("c => { c.scrollTop = c.scrollHeight; }")
    page.wait_for_function("() => document.getElementById('follow').checked")


def test_compare_leaves_out_an_id_that_does_not_exist_and_says_so(
    page: Any, server: Server, filled: Filled
) -> None:
    page.goto(f"{server.url}/compare?ids={filled.first},{filled.second},ffffffffffff")
    assert "ffffffffffff" in page.locator("#compare-missing").inner_text()
    assert page.locator(".cmp-heads .card").count() == 2
    page.goto(f"{server.url}/compare?ids={filled.first},ffffffffffff")  # one left: pick another
    assert "ffffffffffff" in page.locator("#compare-missing").inner_text()
    page.locator(f'#pick tr[data-id="{filled.first}"] input:checked').wait_for()


def test_an_unknown_experiment_page_says_so_and_links_back(page: Any, server: Server) -> None:
    page.goto(f"{server.url}/experiments/ffffffffffff")
    page.locator("text=No experiment ffffffffffff").wait_for()
    page.click("text=All experiments")
    page.wait_for_url(f"{server.url}/")


def test_the_overview_shows_attempts_checkpoints_and_source(
    page: Any, server: Server, filled: Filled
) -> None:
    from phalanx.config import Settings
    from phalanx.domain import Event, EventKind, ExperimentStatus
    from phalanx.store import open_store

    store = open_store(Settings(home=filled.home))
    exp = filled.first
    data = {
        "name": "checkpoint-3",
        "kind": "checkpoint",
        "path": "checkpoints/master/step-000000003.pkl",
        "size": 2048,
        "metadata": {"step": 3, "metrics": {"loss": 0.25}, "policy": {}},
    }
    store.write_events([Event(exp, EventKind.ARTIFACT, data, stream="e2e-ckpt", seq=0)])
    n = store.add_attempt(exp, kind="start")
    reason = "worker-0 exited with code 137; last lines of its log:\n  epoch 3\n  Killed"
    store.finish_attempt(exp, n, status=ExperimentStatus.FAILED, reason=reason)
    m = store.add_attempt(exp, kind="restart", checkpoint_step=3)
    store.finish_attempt(exp, m, status=ExperimentStatus.SUCCEEDED)
    store.set_repro(
        exp, {"git": {"commit": "0123456789abcdef", "branch": "main", "dirty": True}, "python": "3.11"}
    )
    store.close()
    page.goto(f"{server.url}/experiments/{exp}#overview")
    page.locator('#checkpoints tr[data-step="3"]').wait_for()
    assert "latest" in page.locator('#checkpoints tr[data-step="3"]').inner_text()
    assert "loss=0.25" in page.locator("#checkpoints").inner_text()
    restart = page.locator('#attempts tr[data-kind="restart"]').inner_text()
    assert "from step 3" in restart and "succeeded" in restart
    start = page.locator("#attempts td.reason").filter(has_text="code 137").inner_text()
    assert start.splitlines() == [
        "worker-0 exited with code 137; last lines of its log:",
        "  epoch 3",
        "  Killed",
    ]
    assert "git 0123456789ab (main) + uncommitted changes" in page.locator("#source").inner_text()
    shot(page, "20-run-details")
