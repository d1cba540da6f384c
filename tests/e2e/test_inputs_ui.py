"""An experiment's inputs in a real browser: its Overview lists the dataset version (linked to the
version's page, which shows the digest and the files) and the datastore folder it read, and both
pages fit a 390 px phone screen."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.conftest import shot
from tests.integration.server.serverproc import Server

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def served(shared: Server) -> tuple[Server, str, str]:
    from phalanx.config import Settings
    from phalanx.data.inputs import resolve
    from phalanx.spec.inputs import InputSpec
    from phalanx.store import catalog, open_store

    home = shared.home
    data = home / "a-rather-long-folder-name-for-the-digits-dataset-that-must-wrap-on-phones"
    (data / "train").mkdir(parents=True)
    (data / "labels.txt").write_text("0\n1\n")
    (data / "train" / "images-with-a-long-file-name-0000000000000000000000.csv").write_text("1,2\n")
    settings = Settings(home=home)
    store = open_store(settings)
    catalog.add_datastore(store, "lake", str(data))
    catalog.add_dataset(store, "digits", "lake:")
    (data / "labels.txt").write_text("0\n2\n")
    version, _ = catalog.add_dataset(store, "digits", "lake:")  # digits@2
    specs = [
        InputSpec("digits", dataset="digits@latest"),
        InputSpec("raw", datastore="lake", path="train", mode="mount"),
    ]
    _, records = resolve(specs, settings, dry=True)
    exp = store.create_experiment(name="reads-data", project="default", plan={"inputs": records})
    store.close()
    return shared, exp.id, version.digest


def test_the_overview_lists_the_inputs_and_links_to_the_dataset_version(
    page: Any, browser: Any, served: tuple[Server, str, str]
) -> None:
    server, exp_id, digest = served
    page.goto(f"{server.url}/experiments/{exp_id}#overview")
    card = page.locator("#inputs")
    card.wait_for()
    digits = card.locator('tr[data-input="digits"]')
    assert "digits@2" in digits.inner_text() and digest[:12] in digits.inner_text()
    assert "$PHALANX_INPUT_DIGITS" in digits.inner_text()
    raw = card.locator('tr[data-input="raw"]').inner_text()
    assert "datastore lake:train" in raw and "mount" in raw
    shot(page, "inputs-overview")
    card.locator('a[data-dataset-version="digits@2"]').click()
    page.wait_for_url(f"{server.url}/datasets/digits/versions/2")
    page.locator("#dataset-files").wait_for()
    assert page.locator("#dataset-ref").inner_text() == "digits@2"
    assert digest in page.locator("#dataset-version").inner_text()
    paths = page.locator("#dataset-files tr")
    assert sorted(paths.nth(i).get_attribute("data-path") for i in range(paths.count())) == [
        "labels.txt",
        "train/images-with-a-long-file-name-0000000000000000000000.csv",
    ]

    phone = browser.new_context(viewport={"width": 390, "height": 844})
    try:
        pg = phone.new_page()
        pg.set_default_timeout(30_000)
        for url, ready in [
            (f"{server.url}/experiments/{exp_id}#overview", "#inputs"),
            (f"{server.url}/datasets/digits/versions/2", "#dataset-files"),
        ]:
            pg.goto(url)
            pg.locator(ready).wait_for()
            width = pg.evaluate("document.documentElement.scrollWidth")
            assert width <= 390, f"{url} is {width} px wide on a 390 px screen"
    finally:
        phone.close()
