"""The browser tests leave nothing running for the tests after them in the same test process: a
`make test` worker runs this folder's files first, then the other folders' (a file at a time)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO
from tests.e2e.conftest import CHROMIUM

pytestmark = pytest.mark.browser

PROBE = """import asyncio


def test_asyncio_run_starts_a_loop():
    assert asyncio.run(asyncio.sleep(0, "ran")) == "ran"
"""


def test_a_blank_page_opens(page: Any) -> None:
    page.goto("about:blank")
    assert page.evaluate("1 + 1") == 2


@pytest.mark.skipif(not CHROMIUM.exists(), reason="chromium is not installed (scripts/system-deps)")
def test_a_test_after_the_browser_tests_may_call_asyncio_run(tmp_path: Path) -> None:
    """One test process runs a browser test, then a test outside this folder that calls asyncio.run
    (as the proxy's and the batcher's unit tests do): the second must find no event loop marked
    running on its thread (sync Playwright's, while the browser is open)."""
    probe = tmp_path / "probe" / "test_probe.py"
    probe.parent.mkdir()
    probe.write_text(PROBE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    args = ["-p", "no:cacheprovider", "-q", f"--basetemp={tmp_path / 'inner'}"]
    first = f"{Path(__file__).relative_to(REPO)}::test_a_blank_page_opens"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *args, first, str(probe)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,  # within the test's own 300 s; a hung inner run is killed, not left behind
    )
    assert done.returncode == 0 and "2 passed" in done.stdout, done.stdout[-4000:] + done.stderr[-2000:]
