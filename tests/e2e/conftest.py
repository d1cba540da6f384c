"""Browser tests: a real `phalanx server` subprocess on a free port over a store filled by real
experiment runs, driven by Debian's chromium through Playwright. Screenshots go to
test-output/screenshots/."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from phalanx.testing.ports import free_port
from tests.conftest import OUTPUT

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
PHALANX = Path(sys.executable).parent / "phalanx"
SCREENSHOTS = OUTPUT / "screenshots"


@dataclass
class Server:
    url: str
    home: Path
    proc: subprocess.Popen[bytes]
    token: str | None = None


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHALANX_")}
    env.update(PHALANX_HOME=str(home), PYTHONUNBUFFERED="1", **extra)
    return env


def start_server(home: Path, token: str | None = None) -> Server:
    port = free_port()
    args = [str(PHALANX), "server", "--port", str(port), "--log-level", "warning"]
    if token:
        token_file = home / "server.token"
        token_file.write_text(token + "\n")
        args += ["--token-file", str(token_file)]
    log = open(home / f"server-{port}.log", "wb")  # noqa: SIM115 (closed with the process)
    proc = subprocess.Popen(
        args, env=clean_env(home), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(
                f"phalanx server exited with {proc.returncode}: {(home / f'server-{port}.log').read_text()}"
            )
        try:
            with urllib.request.urlopen(f"{url}/api/v1/health", timeout=2) as r:
                if r.status == 200:
                    return Server(url, home, proc, token)
        except OSError:
            time.sleep(0.2)
    stop_server(proc)
    raise RuntimeError("phalanx server did not answer within 90 s")


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=15)


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists():
        pytest.skip(
            "chromium is not installed (scripts/system-deps installs it: apt-get install -y chromium)"
        )
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield b
        b.close()


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


def shot(page: Any, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
