"""The group pages in a real browser: a real `phalanx server` over a store holding a group written
through the controller's own records (the trials' runs are not needed to draw the page)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import shot
from tests.integration.server.serverproc import Server, start_server, stop_server

pytestmark = pytest.mark.browser

GROUP_FILE = """version: 1
kind: group
hptuning:
  concurrency: 2
  random_search: {n_experiments: 4}
  metric: {name: loss, optimization: minimize}
  matrix:
    lr: {loguniform: [-7, -1]}
    opt: {values: [adam, sgd]}
run:
  cmd: python train.py --lr={{ lr }} --opt={{ opt }}
"""


PLAIN = "abcdefabcdef"


def fill_group(home: Path) -> str:
    from phalanx.config import Settings
    from phalanx.domain import Trial
    from phalanx.groups.controller import create
    from phalanx.spec.group import load_group
    from phalanx.store import open_store

    (home / "g.yml").write_text(GROUP_FILE)
    store = open_store(Settings(home=home))
    group = create(store, load_group(home / "g.yml"), workdir=home)
    rows = [
        (0.01, "adam", "done", 0.42),
        (0.001, "sgd", "done", 0.31),
        (0.1, "adam", "pruned", 0.93),
        (0.003, "sgd", "running", 0.5),
    ]
    for n, (lr, opt, state, value) in enumerate(rows):
        exp = store.create_experiment(name=f"g-{n}", project="default", experiment_id=f"{n:012x}")
        store.add_trial(Trial(group.id, n, exp.id, {"lr": lr, "opt": opt}, state, value, 10))
        store.link_experiment(exp.id, group.id)
    store.create_experiment(name="plain", project="default", experiment_id=PLAIN)  # in no group
    store.update_trial(group.id, 2, reason="pruned at step 10: loss 0.93 > median 0.41")
    store.update_group(group.id, status="running")
    return group.id


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    home = tmp_path_factory.mktemp("group-ui-home")
    gid = fill_group(home)
    s = start_server(home)
    yield s, gid
    stop_server(s.proc)


def test_the_group_api_lists_the_trials_and_the_best(served: tuple[Server, str]) -> None:
    server, gid = served
    with urllib.request.urlopen(f"{server.url}/api/v1/groups/{gid[:6]}", timeout=30) as r:
        doc = json.load(r)
    assert [t["number"] for t in doc["trials"]] == [0, 1, 2, 3]
    assert doc["best"]["number"] == 1  # the pruned 0.93 and the running trial are not candidates
    with urllib.request.urlopen(f"{server.url}/api/v1/groups", timeout=30) as r:
        assert [g["id"] for g in json.load(r)] == [gid]


def test_the_group_page_marks_the_best_sorts_and_draws_parallel_coordinates(
    page: Any, served: tuple[Server, str]
) -> None:
    server, gid = served
    page.goto(f"{server.url}/groups")
    page.locator(f'#groups a[href="/groups/{gid}"]').click()
    rows = page.locator("#trials tbody tr")
    rows.first.wait_for()
    assert rows.count() == 4
    assert page.locator("#trials tr.best").get_attribute("data-trial") == "1"
    assert "★ 1" in page.locator("#trials tr.best").inner_text()
    order = lambda: [rows.nth(i).get_attribute("data-trial") for i in range(rows.count())]  # noqa: E731
    assert order() == ["1", "0", "3", "2"]  # by the metric, best first
    page.locator('#trials th[data-key="lr"]').click()
    assert order() == ["1", "3", "0", "2"]  # by lr, ascending
    page.locator('#trials th[data-key="lr"]').click()
    assert order() == ["2", "0", "3", "1"]
    assert page.locator("#parallel polyline").count() == 4
    assert page.locator('#parallel polyline[data-trial="1"]').get_attribute("stroke-width") == "3"
    assert "pruned at step 10" in page.locator("#trials").inner_text()
    ids = ",".join(f"{n:012x}" for n in range(4))  # the trials' scalars overlaid on the Compare page
    assert page.locator("#overlay").get_attribute("href") == f"/compare?ids={ids}"
    shot(page, "group-page")


def test_the_experiment_api_says_which_group_each_trial_belongs_to(served: tuple[Server, str]) -> None:
    server, gid = served
    with urllib.request.urlopen(f"{server.url}/api/v1/experiments", timeout=30) as r:
        items = {e["id"]: e["group_id"] for e in json.load(r)["items"]}
    assert items == {**{f"{n:012x}": gid for n in range(4)}, PLAIN: None}
    with urllib.request.urlopen(f"{server.url}/api/v1/experiments/{1:012x}", timeout=30) as r:
        assert json.load(r)["group_id"] == gid
    # ?group= filters (by a prefix too); it was silently ignored and listed every experiment
    with urllib.request.urlopen(f"{server.url}/api/v1/experiments?group={gid[:6]}", timeout=30) as r:
        assert sorted(e["id"] for e in json.load(r)["items"]) == [f"{n:012x}" for n in range(4)]
    with pytest.raises(urllib.error.HTTPError) as unknown:
        urllib.request.urlopen(f"{server.url}/api/v1/experiments?group=zzzz", timeout=30)
    assert unknown.value.code == 404


def test_the_experiment_list_has_a_group_column_that_leads_to_the_group(
    page: Any, served: tuple[Server, str]
) -> None:
    server, gid = served
    page.goto(server.url)
    trial = page.locator(f'#experiments tbody tr[data-id="{2:012x}"]')
    trial.wait_for()
    assert "GROUP" in page.locator("#experiments thead th").all_inner_texts()  # (headers are upper case)
    link = trial.locator("td.group a")
    link.wait_for()
    assert link.get_attribute("href") == f"/groups/{gid}"
    assert link.inner_text() == f"g ({gid[:6]})"  # the group's name (its file's name) and short id
    assert page.locator(f'#experiments tbody tr[data-id="{PLAIN}"] td.group').inner_text() == "—"
    shot(page, "experiment-list-groups")
    link.click()
    page.wait_for_url(f"{server.url}/groups/{gid}")
    page.locator("#trials tbody tr").first.wait_for()
    assert page.locator("#trials tbody tr").count() == 4
    # and back from a trial's own page
    page.goto(f"{server.url}/experiments/{2:012x}")
    page.locator(f'[data-group="{gid}"] a').click()
    page.wait_for_url(f"{server.url}/groups/{gid}")


def eta_squared(groups: list[list[float]]) -> float:
    """The share of the values' variance between the groups (what the importance panel shows)."""
    values = [v for g in groups for v in g]
    mean = sum(values) / len(values)
    between = sum(len(g) * (sum(g) / len(g) - mean) ** 2 for g in groups)
    return between / sum((v - mean) ** 2 for v in values)


def test_sweep_analysis_brushes_an_axis_and_the_table_follows(page: Any, served: tuple[Server, str]) -> None:
    server, gid = served
    page.goto(f"{server.url}/groups/{gid}")
    rows = page.locator("#trials tbody tr")
    rows.first.wait_for()
    assert page.locator("#parallel polyline").count() == 4  # every trial with a metric value
    assert "lr (log)" in page.locator("#parallel").inner_html()  # 0.001 .. 0.1: a log axis

    def visible() -> list[str]:
        return sorted(str(r.get_attribute("data-trial")) for r in rows.all() if r.is_visible())

    def drag(axis: str, top: float, bottom: float) -> None:
        """Drag along an axis from `top` to `bottom` (fractions of its height from its top end)."""
        box = page.locator(f'#parallel line[data-axis="{axis}"]').bounding_box()
        x = box["x"] + box["width"] / 2
        page.mouse.move(x, box["y"] + box["height"] * top)
        page.mouse.down()
        page.mouse.move(x, box["y"] + box["height"] * bottom, steps=6)
        page.mouse.up()

    # lr on its log axis, from above its top (0.1) down to 40 % up: 0.1 and 0.01 (mid-axis) are
    # inside, 0.003 (24 %) and 0.001 are not (on a linear axis, 0.01 would sit at 9 %)
    drag("lr", -0.03, 0.6)
    assert visible() == ["0", "2"]
    filtered = page.locator("#parallel polyline.filtered")
    assert sorted(str(filtered.nth(i).get_attribute("data-trial")) for i in range(filtered.count())) == [
        "1",
        "3",
    ]
    assert "2 of 4 trials" in page.locator("#brushed").inner_text()
    # a second brush, on the metric (0.31 .. 0.93, linear): its upper half leaves trial 2 (0.93)
    drag("value", -0.03, 0.5)
    assert visible() == ["2"]
    shot(page, "group-sweep-brushed")
    page.locator('#parallel rect.brush-target[data-axis="lr"]').dblclick()
    page.locator('#parallel rect.brush-target[data-axis="value"]').dblclick()
    assert visible() == ["0", "1", "2", "3"] and page.locator("#parallel polyline.filtered").count() == 0

    assert page.locator("#scatter circle").count() == 4  # lr against the metric, one dot per trial
    importance = {
        str(r.get_attribute("data-param")): float(str(r.get_attribute("data-importance")))
        for r in page.locator("#importance tr").all()
    }
    # values: trial 0 (lr 0.01, adam) 0.42, 1 (0.001, sgd) 0.31, 2 (0.1, adam) 0.93, 3 (0.003, sgd) 0.5
    assert importance["opt"] == pytest.approx(eta_squared([[0.42, 0.93], [0.31, 0.5]]))
    assert importance["lr"] == pytest.approx(eta_squared([[0.31, 0.5], [0.42, 0.93]]))  # two bins by lr


def test_the_group_page_fits_a_phone(browser: Any, served: tuple[Server, str]) -> None:
    server, gid = served
    context = browser.new_context(viewport={"width": 390, "height": 844})
    try:
        pg = context.new_page()
        pg.set_default_timeout(30_000)
        pg.goto(f"{server.url}/groups/{gid}")
        pg.locator("#importance tr").first.wait_for()
        width = pg.evaluate("document.documentElement.scrollWidth")
        assert width <= 390, f"the group page is {width} px wide on a 390 px screen"
    finally:
        context.close()


def test_an_ended_groups_delete_button_deletes_it_with_its_trials(page: Any, shared: Server) -> None:
    from phalanx.config import Settings
    from phalanx.domain import Trial
    from phalanx.store import open_store
    from tests.unit.server import fill
    from tests.unit.server.teams_fixtures import make_group

    store = open_store(Settings(home=shared.home))
    try:
        group = make_group(store, "deleting")
        trial = fill.experiment(store, name="t-0", project="deleting")
        store.add_trial(Trial(group.id, 0, trial.id, {"x": 1}, "done", 0.5, 3))
        store.link_experiment(trial.id, group.id)
        store.update_group(group.id, status="succeeded")
    finally:
        store.close()
    page.goto(f"{shared.url}/groups/{group.id}")
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("button#delete-group")
    page.wait_for_url(f"{shared.url}/groups")
    for path in (f"/groups/{group.id}", f"/experiments/{trial.id}"):
        with pytest.raises(urllib.error.HTTPError) as gone:
            urllib.request.urlopen(f"{shared.url}/api/v1{path}", timeout=60)
        assert gone.value.code == 404, path
