"""A service at an origin of its own, in a real browser (`phalanx server --service-origin
'http://{id}.svc.localhost'`; chromium resolves every *.localhost name to loopback): an editor signed
in on the server clicks an experiment's TensorBoard button and lands on the board at its own host,
through a one-use ticket; the board's host holds its own pass and none of the server's session, and a
script on the board's page cannot change the experiment on the server with the editor's session
(docs/services.md#an-origin-per-service)."""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from phalanx.config import Settings
from phalanx.store import open_store
from phalanx.store.accounts import Accounts, Role
from tests.e2e.conftest import cheap_password_hashing, shot
from tests.integration.server.serverproc import Server, running_server
from tests.unit.server import fill

pytestmark = pytest.mark.browser

PASSWORD = "ada-password-0123"
# what a page of the board's origin could try against the server with the signed-in editor's browser
RETAG = """async ([url, body]) => {
  try {
    const answer = await fetch(url, {method: 'PATCH', credentials: 'include',
      headers: {'Content-Type': 'application/json'}, body});
    return answer.status;
  } catch (refused) { return 'blocked'; }
}"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str, str]]:
    """A team server serving services at http://ID.svc.localhost:PORT; an experiment of project
    boards with a loss curve; ada, its editor; and a token of ada's, for reading back."""
    home = tmp_path_factory.mktemp("origin-home")
    store = open_store(Settings(home=home))
    try:
        e = fill.experiment(store, name="boarded", project="boards")
        fill.scalars(store, e.id, "loss", "train", [1.0, 0.6, 0.4, 0.3])
        accounts = Accounts(store)
        with cheap_password_hashing():
            accounts.add_user("root", "root-password-0123", admin=True)
            accounts.add_user("ada", PASSWORD)
        accounts.add_project("boards")
        accounts.set_member("boards", "ada", Role.editor)
        token = accounts.issue_token("ada", "e2e", None)[0]
    finally:
        store.close()
    with running_server(home, args=["--service-origin", "http://{id}.svc.localhost"]) as server:
        yield server, e.id, token


def test_the_board_opens_at_its_own_origin_and_its_page_cannot_act_as_the_editor(
    page: Any, site: tuple[Server, str, str]
) -> None:
    server, experiment, token = site
    page.goto(f"{server.url}/login")
    page.fill("#username", "ada")
    page.fill("#password", PASSWORD)
    with page.expect_navigation():
        page.click("button[type=submit]")
    page.goto(f"{server.url}/experiments/{experiment}")
    page.click("button#tensorboard")
    port = server.url.rsplit(":", 1)[1]
    landed = re.compile(rf"http://([0-9a-f]{{12}})\.svc\.localhost:{port}/services/\1/")
    page.wait_for_url(landed, timeout=120_000)
    page.get_by_text("loss/train").first.wait_for(timeout=120_000)  # TensorBoard's own page, there
    shot(page, "32-tensorboard-own-origin")
    found = landed.match(page.url)
    assert found, page.url
    host = f"{found.group(1)}.svc.localhost"

    cookies = {c["name"]: c for c in page.context.cookies()}
    assert cookies["phalanx_service"]["domain"] == host and cookies["phalanx_service"]["httpOnly"]
    assert cookies["phalanx_session"]["domain"] == "127.0.0.1"  # the server's stays the server's
    assert "phalanx" not in page.evaluate("document.cookie")  # nothing for the page's script to read

    said = page.evaluate(RETAG, [f"{server.url}/api/v1/experiments/{experiment}", '{"tags": ["owned"]}'])
    assert said == "blocked", said  # another origin: the browser does not even send it
    request = urllib.request.Request(
        f"{server.url}/api/v1/experiments/{experiment}", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request, timeout=60) as answer:
        assert "owned" not in json.load(answer)["tags"]
