"""Browser tests: a real `phalanx server` subprocess on a free port, driven by Debian's chromium
through Playwright, over stores filled in-process through the Store protocol (as the supervisor and
the ingester fill them) and by real runs where a test is about running. Screenshots go to
test-output/screenshots/."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from phalanx.config import Settings
from phalanx.store import open_store
from tests.conftest import OUTPUT
from tests.integration.server.serverproc import Server, running_server
from tests.support.webhooks import ALLOW_LOOPBACK

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    # the one port chromium refuses (ERR_UNSAFE_PORT) in the range phalanx.machine.ports.free_port
    # picks from (10,000 up to the kernel's ephemeral ports), where the tests' servers listen
    "--explicitly-allowed-ports=10080",
]
SCREENSHOTS = OUTPUT / "screenshots"


@pytest.fixture(scope="package")
def browser() -> Iterator[Any]:
    """chromium, one for each stretch of this folder's tests that a test process runs (`make test`'s
    workers take a file at a time, this folder's first), closed before a test outside it. While sync
    Playwright is open it marks its event loop running on this thread, between its calls too, and
    asyncio.run refuses to start there: kept for the session, it failed a later test's asyncio.run."""
    if not CHROMIUM.exists():
        pytest.skip(
            "chromium is not installed (scripts/system-deps installs it: apt-get install -y chromium)"
        )
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture(scope="session")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One `phalanx server` over one home, for the modules whose checks read only what they wrote
    there (their own experiments by id, their own project, dataset, model or queue entries): each
    module fills ``shared.home`` with its own; starting a server is most of what such a module's
    set-up cost. A module whose checks read whole lists (the run table, groups, users and sign-in)
    has a home and a server of its own."""
    home = tmp_path_factory.mktemp("shared-home")
    open_store(Settings(home=home)).close()  # migrated before the server opens it
    with running_server(home, args=ALLOW_LOOPBACK) as server:  # test_alerts_ui's receiver is on loopback
        yield server


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    pg.set_default_timeout(30_000)
    yield pg
    context.close()
    assert not errors, f"the page raised JavaScript errors: {errors}"


FITS = (
    "() => { const d = document.documentElement;"
    " return d.scrollHeight <= innerHeight && d.scrollWidth <= innerWidth; }"
)


def shot(page: Any, name: str) -> Path:
    """The whole page as a picture. A page that fits its viewport is the same picture taken as it is:
    a full-page capture lays the page out again at its full size first (seconds for a console of
    10,000 lines on a loaded machine)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=not page.evaluate(FITS))
    return path


@contextmanager
def cheap_password_hashing() -> Iterator[None]:
    """Users made in this process get argon2id hashes at argon2's cheapest cost, as in the unit tests
    (tests/unit/conftest.py): the same algorithm and format, and the server checks each sign-in at the
    cost its hash names. The product's own cost (0.2-0.5 s a hash and as much a sign-in, on purpose)
    is pinned by tests/unit/server/test_teams_auth.py; these tests are about pages."""
    from pwdlib import PasswordHash
    from pwdlib.hashers.argon2 import Argon2Hasher

    from phalanx.store import accounts

    cheapest = PasswordHash((Argon2Hasher(time_cost=1, memory_cost=8, parallelism=1),))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(accounts, "_hasher", lambda: cheapest)
        yield
