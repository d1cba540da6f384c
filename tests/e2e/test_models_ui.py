"""The Models pages in a real browser: a real `phalanx server` over a store holding two registered
versions of one model, one under @prod."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import shot
from tests.integration.server.serverproc import Server

pytestmark = pytest.mark.browser
pytest.importorskip("onnxruntime")


def fill_registry(home: Path) -> list[str]:
    from phalanx.config import Settings
    from phalanx.registry.checker import check_in_process
    from phalanx.registry.service import Registry
    from phalanx.store import open_store
    from tests.support.onnx_models import random_linear, record_model

    store = open_store(Settings(home=home))
    registry = Registry(store, check_in_process)
    ids = []
    for seed in (1, 2):
        data = {"name": "digits", "kind": "dataset", "ref": f"digits-data@{seed}", "digest": "cd" * 32}
        exp = store.create_experiment(name=f"train-{seed}", project="default", plan={"inputs": [data]}).id
        record_model(store, exp, "digits", random_linear(seed))
        registry.register(exp, "digits", description="digits MLP" if seed == 1 else None)
        ids.append(exp)
    registry.set_alias("digits", "prod", 1)
    store.close()
    return ids


@pytest.fixture(scope="module")
def served(shared: Server) -> tuple[Server, list[str]]:
    return shared, fill_registry(shared.home)


def test_the_models_pages_show_versions_aliases_and_lineage(
    page: Any, served: tuple[Server, list[str]]
) -> None:
    server, ids = served
    page.goto(server.url)
    page.locator('.topbar nav a[data-nav="models"]').click()
    row = page.locator('#models tbody tr[data-model="digits"]')
    row.wait_for()
    assert "@prod → 1" in row.inner_text()
    row.locator("a").click()
    versions = page.locator("#versions tbody tr")
    versions.first.wait_for()
    assert [versions.nth(i).get_attribute("data-version") for i in range(versions.count())] == ["2", "1"]
    first = page.locator('#versions tr[data-version="1"]')
    assert first.locator('[data-alias="prod"]').count() == 1
    assert "passed" in first.inner_text() and "input: float32[?, 64]" in first.inner_text()
    assert "digits-data@1 (cdcdcdcdcdcd)" in first.locator('[data-col="data"]').inner_text()
    link = first.locator(f'a[href="/experiments/{ids[0]}"]')
    assert link.count() == 1
    shot(page, "models-page")
    link.click()
    page.wait_for_url(f"{server.url}/experiments/{ids[0]}")
