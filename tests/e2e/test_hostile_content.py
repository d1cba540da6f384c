"""What an experiment reports is shown as text, never run as markup: a real browser over a real
`phalanx server` (with a token, signed in through /login), with markup in the name, tags, notes,
params, log lines, report_text, scalar title and series, and an artifact name. A guard for the UI's
"no innerHTML with user content" rule (issue #16 QA found it held)."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.server.serverproc import Server, start_server, stop_server

pytestmark = pytest.mark.browser

TOKEN = "hostile-content-token-0123456789"
X = "<img src=x onerror=window.__pwned=1><script>window.__pwned=2</script>"
EXP = "0badc0de0001"


def _post(server: Server, method: str, path: str, body: Any) -> None:
    req = urllib.request.Request(
        f"{server.url}/api/v1{path}",
        data=json.dumps(body).encode(),
        method=method,
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"},
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        assert r.status == 200


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    home: Path = tmp_path_factory.mktemp("hostile-home")
    s = start_server(home, token=TOKEN)
    now = time.time()

    def rec(kind: str, data: dict[str, Any], seq: int) -> dict[str, Any]:
        return {"experiment_id": EXP, "kind": kind, "data": data, "stream": "h-1", "seq": seq, "time": now}

    try:
        _post(s, "POST", "/ingest", {"events": [rec("experiment", {"name": X, "tags": [X]}, 0)]})
        events = [
            rec("param", {"key": X, "value": X}, 1),
            rec("log", {"lines": [X, f"\x1b[31m{X}\x1b[0m"], "stream": "stderr"}, 2),
            rec("text", {"title": X, "text": X}, 3),
            rec("scalar", {"title": X, "series": X, "value": 1.0, "iteration": 1}, 4),
            rec("artifact", {"name": X, "path": "a.txt", "kind": "text", "content_type": "text/plain"}, 5),
        ]
        _post(s, "POST", "/ingest", {"events": events})
        _post(s, "PATCH", f"/experiments/{EXP}", {"notes": X})
        yield s
    finally:
        stop_server(s.proc)


def test_markup_an_experiment_reported_is_shown_as_text_on_every_page(page: Any, server: Server) -> None:
    page.goto(f"{server.url}/login")
    page.fill("input[name=token]", TOKEN)
    page.click("button[type=submit]")
    page.wait_for_url(f"{server.url}/")
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.locator(f'tr[data-id="{EXP}"]').wait_for()
    assert X in page.locator(f'tr[data-id="{EXP}"]').inner_text()
    page.goto(f"{server.url}/experiments/{EXP}")
    tabs = page.locator("[role=tab]")
    tabs.first.wait_for()
    names = [tabs.nth(i).get_attribute("data-tab") for i in range(tabs.count())]
    for name in names:
        page.click(f'[data-tab="{name}"]')
        page.wait_for_load_state("networkidle")
        assert page.evaluate("window.__pwned") is None, name
        assert page.locator("img[src=x]").count() == 0, name
        assert page.locator("body script").count() == 0, name
    page.goto(f"{server.url}/compare?ids={EXP}")
    page.wait_for_load_state("networkidle")
    assert page.evaluate("window.__pwned") is None
    assert not dialogs
