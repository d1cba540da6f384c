"""What people read off the pages (issue 40), on one team server over one run: a 1e-5 learning
rate's tick labels, the file's declared param in the table and Compare, the Queue page as a member
of one of two projects, and a viewer offered nothing they may not do.

The run is what `phalanx run -f tiny.yaml --param lr=0.00001` records (written in-process: these tests
read pages, they do not run anything): a script that reads --lr from sys.argv, reports the rate it
trains at with log_metrics and never reports a param, so its only param is the file's declared one
(that `phalanx run` records it is tests/integration/local/test_declared_params.py's subject). Then a
team: projects alpha (the run's) and beta, ed an editor of alpha, vera a viewer of alpha; the
machine's queue holds a beta run and two alpha ones.
"""

from __future__ import annotations

import os
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from phalanx.config import Settings
from phalanx.domain import DECLARED_PARAMS, EventKind, ExperimentStatus, Replica, ReplicaState
from phalanx.domain import Role as ReplicaRole
from phalanx.machine.ledger import Capacity, Need
from phalanx.queue import ledger_for
from phalanx.store import open_store
from phalanx.store.accounts import Accounts, Role
from tests.e2e.conftest import cheap_password_hashing, shot
from tests.integration.server.serverproc import Server, start_server, stop_server
from tests.unit.server import fill

pytestmark = pytest.mark.browser

HUGE = Capacity(cpus=tuple(range(4096)), gpus=(), memory_mib=1e9)
FILE = """
version: 1
kind: experiment
name: tiny
project: alpha
params: {lr: 0.1}
run:
  cmd: python train.py --lr {{ lr }}
"""
LR = 1e-05  # --param lr=0.00001
PASSWORDS = {"root": "root-password", "ed": "ed-password", "vera": "vera-password"}


@dataclass
class Team:
    server: Server
    run: str  # the run of tiny.yaml (alpha)
    other: str  # a filled alpha run beside it, for Compare
    secret: str  # beta's run, holding the machine
    waiting: str  # alpha, first in the queue
    later: str  # alpha, second


def the_run(store: Any) -> str:
    """What `phalanx run -f tiny.yaml --param lr=0.00001` records: a master, the file's params after
    --param as section Declared, and the 20 points of "lr" that train.py logs as the master with
    ``log_metrics(step=step, lr=lr * (1 + 2 * step / 19))`` (1e-5 .. 3e-5)."""
    t0 = time.time() - 60
    e = store.create_experiment(
        name="tiny",
        project="alpha",
        replicas=[Replica("", "master", ReplicaRole.MASTER, 0, 0)],
        backend="local",
        topology={"master": 1, "worker": 0, "ps": 0},
        spec_text=textwrap.dedent(FILE),
        plan={
            "name": "tiny",
            "project": "alpha",
            "command": "python train.py --lr 1e-05",
            "params": {"lr": LR},
        },
        created_at=t0,
    )
    store.update_experiment(e.id, status=ExperimentStatus.RUNNING, started_at=t0)
    declared = fill.event(e.id, EventKind.PARAM, {"section": DECLARED_PARAMS, "values": {"lr": LR}}, time=t0)
    points = [["lr", "master", step, LR * (1 + 2 * step / 19), t0 + 1 + step / 10] for step in range(20)]
    logged = fill.event(e.id, EventKind.SCALAR, {"points": points}, time=t0 + 3)
    store.write_events([declared, logged])
    store.update_replica(
        e.id, "master", state=ReplicaState.SUCCEEDED, host="127.0.0.1", pid=4242, exit_code=0, started_at=t0
    )
    store.update_experiment(e.id, status=ExperimentStatus.SUCCEEDED, finished_at=t0 + 4)
    return str(e.id)


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Team]:
    home = tmp_path_factory.mktemp("answers-home")
    store = open_store(Settings(home=home))
    try:
        run = the_run(store)
        other = fill.experiment(store, name="other", project="alpha")
        fill.param(store, other.id, "Declared", "lr", 0.001)
        fill.scalars(store, other.id, "lr", "master", [1e-3, 2e-3])
        secret = fill.experiment(store, name="beta-secret", project="beta", status=ExperimentStatus.RUNNING)
        waiting = fill.experiment(
            store, name="alpha-waiting", project="alpha", status=ExperimentStatus.QUEUED
        )
        later = fill.experiment(store, name="alpha-later", project="alpha", status=ExperimentStatus.QUEUED)
        accounts = Accounts(store)
        with cheap_password_hashing():
            accounts.add_user("root", PASSWORDS["root"], admin=True)
            accounts.add_user("ed", PASSWORDS["ed"])
            accounts.add_user("vera", PASSWORDS["vera"])
        for project in ("alpha", "beta"):
            accounts.add_project(project)
        accounts.set_member("alpha", "ed", Role.editor)
        accounts.set_member("alpha", "vera", Role.viewer)
    finally:
        store.close()
    ledger = ledger_for(Settings(home=home))
    me = os.getpid()  # a live owner, as each entry's `phalanx run` is
    ledger.admit(secret.id, Need(cpus=4096), HUGE, pid=me, name=secret.name, project="beta")
    ledger.admit(waiting.id, Need(cpus=2), HUGE, pid=me, name=waiting.name, project="alpha")
    ledger.admit(later.id, Need(cpus=1), HUGE, pid=me, name=later.name, project="alpha")
    server = start_server(home)
    yield Team(server, run, other.id, secret.id, waiting.id, later.id)
    stop_server(server.proc)


def sign_in(page: Any, team: Team, user: str) -> None:
    page.goto(f"{team.server.url}/login")
    page.fill("#username", user)
    page.fill("#password", PASSWORDS[user])
    with page.expect_navigation():
        page.click("button[type=submit]")


def tick_labels(page: Any, card: str) -> list[tuple[float, str]]:
    """The y axis' ticks and their labels as uPlot drew them on the canvas."""
    axis = f"document.querySelector('{card}').plot.axes[1]"
    got = page.evaluate(f"[{axis}._splits, {axis}._values]")
    return [(float(v), str(label)) for v, label in zip(got[0], got[1], strict=True)]


def read_right(ticks: list[tuple[float, str]]) -> None:
    """Every label says its tick's value (a 1e-5 tick is not "0") and no two read the same."""
    labels = [label for _, label in ticks if label]
    assert len(labels) == len(set(labels)), ticks
    for value, label in ticks:
        if label:
            assert float(label) == pytest.approx(value, rel=1e-6, abs=1e-12), ticks


def test_a_1e5_learning_rate_reads_in_significant_digits_on_a_linear_and_a_log_axis(
    page: Any, team: Team
) -> None:
    sign_in(page, team, "ed")
    page.goto(f"{team.server.url}/experiments/{team.run}#scalars")
    card = '#charts .chart-card[data-title="lr"]'
    page.wait_for_function(f"() => document.querySelector('{card}')?.dataset.ready === 'true'")
    linear = tick_labels(page, card)
    read_right(linear)
    assert sum(1 for value, label in linear if 1e-5 <= value <= 3e-5 and "e-5" in label) >= 3, linear
    page.click(f"{card} .chart-log")  # this chart alone on a log axis
    page.wait_for_function(f"() => document.querySelector('{card}').dataset.log === 'true'")
    logged = tick_labels(page, card)
    read_right(logged)
    assert any("e-5" in label for _, label in logged), logged
    assert page.locator("#log-scale").is_checked() is False  # the toolbar's choice is untouched
    shot(page, "90-small-values")


def test_the_files_declared_param_is_a_column_a_filter_and_a_compare_row(page: Any, team: Team) -> None:
    sign_in(page, team, "ed")
    page.goto(f"{team.server.url}/?col=param:lr")
    box = page.locator('input[aria-label="column filter"]')
    box.fill("param:lr < 0.0001 or param:lr > 1")
    box.press("Enter")
    page.wait_for_function("() => document.querySelectorAll('#experiments tbody tr[data-id]').length === 1")
    row = page.locator(f'#experiments tbody tr[data-id="{team.run}"] td[data-column="param:lr"]')
    assert row.get_attribute("title") == "0.00001"  # the declared value, though the script reported none
    page.goto(f"{team.server.url}/compare?ids={team.run},{team.other}")
    declared = page.locator('#compare-params-table tr.differs[data-key="lr"]')
    declared.first.wait_for()
    assert "Declared" in declared.first.inner_text()


def test_the_queue_as_a_member_of_one_of_two_projects(page: Any, team: Team) -> None:
    sign_in(page, team, "ed")
    page.goto(f"{team.server.url}/queue")
    masked = page.locator("#queue-running tr.masked")
    masked.wait_for()
    assert "(a run of another project)" in masked.inner_text() and "beta" not in masked.inner_text()
    assert masked.locator("a, button, input").count() == 0  # no link, no Stop, no priority box
    assert team.secret not in page.content()
    rows = page.locator("#queue-waiting tbody tr")
    assert rows.evaluate_all("rs => rs.map(r => r.dataset.id)") == [team.waiting, team.later]
    assert rows.nth(0).locator("button", has_text="Stop").count() == 1
    assert [p.strip() for p in page.locator("#queue-projects td:first-child").all_inner_texts()] == ["alpha"]
    shot(page, "91-queue-member")
    later = page.locator(f'#queue-waiting tr[data-id="{team.later}"] input.priority')
    later.fill("5")
    with page.expect_response(
        lambda r: r.url.endswith(f"/queue/{team.later}") and r.request.method == "PATCH"
    ):
        later.press("Enter")
    page.wait_for_function(
        "id => document.querySelector('#queue-waiting tbody tr')?.dataset.id === id", arg=team.later
    )


def test_a_viewer_is_offered_nothing_their_role_does_not_allow(page: Any, team: Team) -> None:
    sign_in(page, team, "vera")
    page.goto(f"{team.server.url}/experiments/{team.run}")
    page.locator(".exp-head h1").wait_for()
    page.locator("#edit-tags").wait_for()
    assert page.locator(".exp-head button", has_text="Delete").count() == 0
    assert page.locator("#run-again").count() == 0 and page.locator("#save-notes").count() == 0
    assert page.locator("#edit-tags").get_attribute("readonly") is not None
    page.goto(f"{team.server.url}/queue")
    page.locator("#queue-waiting").wait_for()
    assert page.locator("#queue-waiting button, #queue-waiting input").count() == 0
    shot(page, "92-viewer")
    page.context.clear_cookies()
    sign_in(page, team, "root")  # a project admin is offered Delete on the same page
    page.goto(f"{team.server.url}/experiments/{team.run}")
    page.locator(".exp-head button", has_text="Delete").wait_for()
    assert page.locator("#run-again").count() == 1
