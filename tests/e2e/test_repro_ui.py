"""What ran and what differs, in a real browser: two `phalanx run`s from a dirty git tree, the second
with another param, another line of code and one more installed package. The Overview shows the
recorded git state, versions, snapshot and uncommitted diff; the compare page shows `phalanx diff`.
The changed line holds a <script> tag, which must show as text and never run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import shot
from tests.integration.server.serverproc import PHALANX, Server, clean_env, start_server, stop_server

pytestmark = pytest.mark.browser

HOSTILE = "<script>window.__pwned = 1</script><img src=x onerror=window.__pwned=2>"
SPEC = "version: 1\nkind: experiment\nparams:\n  lr: 0.1\nrun:\n  cmd: python train.py {{ lr }}\n"
TRAIN = "import sys\nprint('lr is', sys.argv[1])\nprint({line!r})\n"
MARKER = "phalanx-e2e-marker"  # a package only the second run's interpreter sees


@dataclass
class Pair:
    home: Path
    a: str
    b: str


def _git(folder: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.email=t@example.com", "-c", "user.name=t", *args],
        cwd=folder,
        check=True,
        capture_output=True,
    )


def _run(home: Path, spec: Path, *extra: str, env: dict[str, str] | None = None) -> str:
    proc = subprocess.Popen(
        [str(PHALANX), "run", "-f", str(spec), "-o", "json", *extra],
        env=clean_env(home, **(env or {})),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    assert proc.returncode == 0, err[-3000:]
    doc = json.loads(out)
    assert doc["status"] == "succeeded", doc
    return str(doc["id"])


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Pair:
    home = tmp_path_factory.mktemp("repro-home")
    folder = tmp_path_factory.mktemp("repro-proj")
    (folder / "train.py").write_text(TRAIN.format(line="version one"))
    spec = folder / "polyaxonfile.yml"
    spec.write_text(SPEC)
    _git(folder, "init", "-q")
    _git(folder, "add", "train.py", spec.name)
    _git(folder, "commit", "-q", "-m", "first")
    (folder / "train.py").write_text(TRAIN.format(line=f"version two {HOSTILE}"))  # dirty
    a = _run(home, spec)

    (folder / "train.py").write_text(TRAIN.format(line="version three"))
    site = tmp_path_factory.mktemp("repro-site")
    info = site / "phalanx_e2e_marker-1.2.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {MARKER}\nVersion: 1.2.3\n")
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    b = _run(home, spec, "--param", "lr=0.5", env={"PYTHONPATH": path})
    return Pair(home, a, b)


@pytest.fixture(scope="module")
def server(pair: Pair) -> Iterator[Server]:
    s = start_server(pair.home)
    yield s
    stop_server(s.proc)


def _not_run(page: Any) -> None:
    assert page.evaluate("window.__pwned") is None, "markup from the diff ran"


def test_the_overview_shows_what_ran_with_the_uncommitted_diff_as_text(
    page: Any, server: Server, pair: Pair
) -> None:
    page.goto(f"{server.url}/experiments/{pair.a}#overview")
    diff = page.locator("#source-diff")
    diff.wait_for()
    text = diff.inner_text()
    assert "-print('version one')" in text
    assert f"+print('version two {HOSTILE}')" in text  # the tag as characters
    assert diff.locator("script, img").count() == 0
    summary = page.locator("#source").inner_text()
    assert "+ uncommitted changes" in summary and "python " in summary and "phalanx " in summary
    assert " packages" in summary
    assert page.locator("#source-commit").inner_text().strip()
    assert "files" in page.locator("#source-snapshot").inner_text()
    assert ".git/" in page.locator("#source-snapshot").inner_text()
    packages = page.locator("#source-package-list")
    packages.locator("summary").click()
    listed = packages.locator("div.mono > div").all_inner_texts()
    assert f"{len(listed)} packages" in packages.locator("summary").inner_text()
    assert any(p.startswith("phalanx==") for p in listed) and MARKER not in " ".join(listed)
    shot(page, "30-what-ran")
    _not_run(page)


def test_compare_shows_the_param_code_and_package_differences(page: Any, server: Server, pair: Pair) -> None:
    page.goto(f"{server.url}/experiments/{pair.a}#overview")
    page.click("#diff-with")  # the Overview's way to the diff: pick the other experiment
    page.locator(f'#pick tr[data-id="{pair.b}"] input').check()
    page.click("text=Compare (2)")
    view = page.locator(f'.repro-diff[data-a="{pair.a}"][data-b="{pair.b}"]')
    view.wait_for()

    lr = view.locator('[data-section="params"] tr[data-key="lr"]').inner_text()
    assert "0.1" in lr and "0.5" in lr
    code = view.locator('pre[data-section="code"]')
    assert "+print('version three')" in code.inner_text()
    assert f"-print('version two {HOSTILE}')" in code.inner_text()
    assert code.locator("script, img").count() == 0
    marker = view.locator(f'[data-section="packages"] tr[data-key="{MARKER}"]').inner_text()
    assert "1.2.3" in marker and "—" in marker  # absent from A, installed for B
    shot(page, "31-compare-what-ran")
    _not_run(page)


def test_on_a_phone_the_diffs_scroll_inside_their_box(browser: Any, server: Server, pair: Pair) -> None:
    context = browser.new_context(viewport={"width": 390, "height": 844})
    try:
        pg = context.new_page()
        pg.set_default_timeout(30_000)
        for url, ready in [
            (f"{server.url}/experiments/{pair.a}#overview", "#source-diff"),
            (f"{server.url}/compare?ids={pair.a},{pair.b}", ".repro-diff pre"),
        ]:
            pg.goto(url)
            pg.locator(ready).first.wait_for()
            width = pg.evaluate("document.documentElement.scrollWidth")
            assert width <= 390, f"{url} is {width} px wide on a 390 px screen"
    finally:
        context.close()
