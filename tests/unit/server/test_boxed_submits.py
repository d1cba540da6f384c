"""Every experiment a boxing server accepts carries its project's box in its launch: a submit's and a
clone's in the launch order the launcher starts (LaunchOptions.isolation), a group's in the group's
options (each trial's, and its build's); a trusting server's carry none. Nothing starts here (the
app has no launcher); the box on a real server is tests/integration/isolation's."""

from __future__ import annotations

import gzip
import io
import tarfile
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from phalanx.machine import identities
from phalanx.machine.box import Isolation, isolation_of
from phalanx.runner.rerunning import RerunSource
from phalanx.server import boxing, submitting
from phalanx.server.boxing import BoxMode, BoxPolicy
from phalanx.server.orders import read as read_order
from phalanx.server.settings import ServerSettings
from phalanx.spec.loader import load_spec_text
from phalanx.store.base import LocalStore
from tests.unit.server import fill

EXP = "version: 1\nkind: experiment\nproject: nlp\nrun:\n  cmd: python train.py\n"
GROUP = """\
version: 1
kind: group
project: nlp
hptuning:
  concurrency: 1
  grid_search: {n_experiments: 2}
  matrix:
    lr: {values: [0.1, 0.2]}
run:
  cmd: python train.py --lr={{ lr }}
"""
BOXING = BoxPolicy(BoxMode.BOX, "http://127.0.0.1:9", uids=(300000, 300009), hidden=("/srv/phalanx",))


def bundle() -> bytes:
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as gz, tarfile.open(fileobj=gz, mode="w") as tar:
        data = b"print('hi')\n"
        info = tarfile.TarInfo("train.py")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def post(client: TestClient, text: str, name: str = "exp.yml") -> str:
    r = client.post(
        "/api/v1/experiments",
        data={"file_name": name, "file_text": text},
        files={"bundle": ("code.tar.gz", bundle(), "application/gzip")},
    )
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


@pytest.fixture
def boxing_server(settings: ServerSettings, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The policy a root server with bubblewrap records; accounts from its uid range (no useradd)."""
    monkeypatch.setattr(identities, "_has_account", lambda uid: False)
    with boxing.recorded(settings.store.home, BOXING):
        yield


def nlp_box(isolation: Isolation | None) -> None:
    assert isolation is not None, "accepted unboxed on a boxing server"
    assert (isolation.project, isolation.uid, isolation.report_to) == ("nlp", 300000, "http://127.0.0.1:9")
    assert isolation.hidden == ("/srv/phalanx",)


def clone_source(store: LocalStore, monkeypatch: pytest.MonkeyPatch) -> str:
    """An origin whose rerun rule answers nlp's file and a snapshot (recorded launches are
    tests/unit/runner's): the id to clone."""
    origin = fill.experiment(store, project="nlp")
    spec = load_spec_text(EXP, "exp.yml")
    source = RerunSource(origin, spec, {"file": "exp.yml"}, {}, bundle(), None)
    monkeypatch.setattr(submitting, "rerun_source", lambda *a, **k: source)
    return origin.id


def test_a_boxing_servers_submits_and_clones_carry_their_projects_box_to_the_launcher(
    client: TestClient,
    store: LocalStore,
    settings: ServerSettings,
    boxing_server: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    submitted = post(client, EXP)
    order = read_order(settings.store, submitted)
    assert order is not None and order.launch is not None
    nlp_box(order.launch.options.isolation)

    r = client.post("/api/v1/experiments", json={"from": clone_source(store, monkeypatch)})
    assert r.status_code == 201, r.text
    order = read_order(settings.store, r.json()["id"])
    assert order is not None and order.launch is not None and order.launch.options.accepted
    nlp_box(order.launch.options.isolation)


def test_a_boxing_servers_group_keeps_its_box_for_every_trial(
    client: TestClient, store: LocalStore, boxing_server: None
) -> None:
    pytest.importorskip("optuna")
    group = store.get_group(post(client, GROUP, "group.yml"))
    nlp_box(isolation_of(group.options))  # what the launcher builds with, and every controller reads


def test_a_trusting_server_accepts_everything_unboxed(
    client: TestClient, store: LocalStore, settings: ServerSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    with boxing.recorded(settings.store.home, BoxPolicy(BoxMode.TRUST, why="--trust-submitters")):
        order = read_order(settings.store, post(client, EXP))
        r = client.post("/api/v1/experiments", json={"from": clone_source(store, monkeypatch)})
        clone = read_order(settings.store, r.json()["id"])
    assert order is not None and order.launch is not None and order.launch.options.isolation is None
    assert clone is not None and clone.launch is not None and clone.launch.options.isolation is None
