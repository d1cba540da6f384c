"""Single sign-on in a real browser: a team server configured with the loopback identity provider
(tests/support/oidc_provider.py); "Sign in with SSO" on the login page goes to the provider and
back, and the user, created on the way with the role their group maps to, lands on the run table
showing their project's experiments and no other project's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from phalanx.config import Settings
from phalanx.store import open_store
from tests.e2e.conftest import cheap_password_hashing, shot
from tests.integration.server.serverproc import Server, start_server, stop_server
from tests.integration.server.test_teams_audit import admin
from tests.support.oidc_provider import IdpUser, Provider, running_provider

pytestmark = pytest.mark.browser


@pytest.fixture
def sso_server(phalanx_home: Path) -> Iterator[tuple[Provider, Server, str]]:
    store = open_store(Settings(home=phalanx_home))
    try:
        ids = [
            str(store.create_experiment(name=name, project=project).id)
            for project, names in (("vision", ["resnet-a", "resnet-b"]), ("nlp", ["bert-secret"]))
            for name in names
        ]
    finally:
        store.close()
    with cheap_password_hashing():
        admin(phalanx_home, "user", "add", "root", "--admin", "--password-stdin", stdin="root-password\n")
    admin(phalanx_home, "project", "add", "vision")
    admin(phalanx_home, "project", "add", "nlp")
    grace = IdpUser(sub="u-7", preferred_username="grace", email="grace@example.org", groups=["ml-vision"])
    with running_provider(grace, client_id="phalanx-ui", client_secret="ui-client-secret-123") as provider:
        server = start_server(
            phalanx_home,
            env={
                "PHALANX_OIDC_ISSUER": provider.issuer,
                "PHALANX_OIDC_CLIENT_ID": "phalanx-ui",
                "PHALANX_OIDC_CLIENT_SECRET": "ui-client-secret-123",
                "PHALANX_OIDC_GROUPS_CLAIM": "groups",
                "PHALANX_OIDC_ROLE_MAP": "ml-vision=vision:viewer",
            },
        )
        provider.client.redirect_uris.append(f"{server.url}/login/sso/callback")
        try:
            yield provider, server, ids[0]
        finally:
            stop_server(server.proc)


def test_sso_login_lands_on_the_users_projects_in_the_run_table(
    page: Any, sso_server: tuple[Provider, Server, str]
) -> None:
    provider, server, resnet_a = sso_server
    # a link to an experiment's tab: after signing in at the provider, the user is on that tab
    page.goto(f"{server.url}/experiments/{resnet_a}#console")
    button = page.locator("a.button.sso")
    button.wait_for()
    assert "/login" in page.url
    assert "%23console" in button.get_attribute("href")
    page.set_viewport_size({"width": 390, "height": 800})  # usable on a phone: nothing overflows
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    shot(page, "sso-login")
    page.set_viewport_size({"width": 1400, "height": 900})
    button.click()
    page.wait_for_url(f"{server.url}/experiments/{resnet_a}#console")
    page.locator('.tabs a.active[data-tab="console"]').wait_for()
    page.goto(f"{server.url}/")  # the run table: the projects the provider's groups gave
    rows = page.locator("#experiments tbody tr[data-id]")
    rows.filter(has_text="resnet-a").wait_for()
    rows.filter(has_text="resnet-b").wait_for()
    assert rows.count() == 2
    assert page.locator("#experiments", has_text="bert-secret").count() == 0  # nlp: not grace's
    assert provider.logins == 1
    shot(page, "sso-run-table")
