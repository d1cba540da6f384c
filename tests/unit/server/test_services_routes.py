"""The services' routes in-process (docs/services.md), over boards without a process
(tests/unit/server/fake_services.py): one board per target, handed back when asked again; a body
naming no target or two is refused saying so; a project with no experiment and a replica's token get
no board; the proxy forwards the path and query but not the caller's credentials, and keeps no
cookie the board tries to set."""

from __future__ import annotations

import base64
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from phalanx.server.app import create_app
from phalanx.server.service_record import Service
from phalanx.server.service_spawn import Instance
from phalanx.server.services import Services, Timing
from phalanx.server.settings import ServerSettings
from phalanx.services.targets import Target
from phalanx.store import catalog
from phalanx.store.base import Store
from phalanx.store.registry_records import parse_ref
from phalanx.tokens import experiment_token
from tests.unit.server import fill
from tests.unit.server.fake_services import (
    RESPAWN_FAILS,
    RESPAWNED,
    SEEN,
    STARTED_WITH,
    FakeBoard,
    FakeProcess,
)
from tests.unit.server.teams_fixtures import make_model, make_team

pytestmark = pytest.mark.usefixtures("started_without_a_process")


def test_one_board_per_target_handed_back_when_asked_again(settings: ServerSettings, store: Store) -> None:
    tokens = make_team(store).tokens
    e = fill.experiment(store, project="A")
    with TestClient(create_app(settings, store)) as client:
        viewer = {"Authorization": f"Bearer {tokens['viewer_a']}"}
        first = client.post("/api/v1/services", json={"experiment": e.id[:6]}, headers=viewer)
        again = client.post("/api/v1/services", json={"experiment": e.id}, headers=viewer)
        project = client.post("/api/v1/services", json={"project": "A"}, headers=viewer)
        listed = client.get("/api/v1/services", headers=viewer).json()
    assert (first.status_code, first.json()["started"]) == (201, True)
    assert (again.status_code, again.json()["started"], again.json()["id"]) == (
        200,
        False,
        first.json()["id"],
    )
    assert first.json()["target"] == {"kind": "experiment", "id": e.id}
    assert project.status_code == 201 and project.json()["id"] != first.json()["id"]
    assert [s["id"] for s in listed] == [first.json()["id"], project.json()["id"]]


def test_bad_asks_are_refused_saying_why(settings: ServerSettings, store: Store) -> None:
    e = fill.experiment(store, project="A")
    token = "server-token-of-the-services-test-0123"
    app = create_app(settings.model_copy(update={"token": token, "notebooks": True}), store)
    with TestClient(app, headers={"Authorization": f"Bearer {token}"}) as client:
        none = client.post("/api/v1/services", json={})
        two = client.post("/api/v1/services", json={"experiment": e.id, "project": "A"})
        other = client.post("/api/v1/services", json={"kind": "jupyter", "project": "A"})
        notebook_of = client.post("/api/v1/services", json={"kind": "notebook", "experiment": e.id})
        board_inputs = client.post(
            "/api/v1/services", json={"project": "A", "inputs": [{"name": "x", "dataset": "x"}]}
        )
        model_and_project = client.post(
            "/api/v1/services", json={"kind": "model", "model": "x", "project": "A"}
        )
        no_model = client.post("/api/v1/services", json={"kind": "model", "model": "nothing@prod"})
        no_data = client.post(
            "/api/v1/services",
            json={"kind": "notebook", "project": "A", "inputs": [{"name": "x", "dataset": "nothing@latest"}]},
        )
        empty = client.post("/api/v1/services", json={"project": "nothing-here"})
        gone = client.get("/api/v1/services/abcdef012345")
        replica = client.post(
            "/api/v1/services",
            json={"experiment": e.id},
            headers={"Authorization": f"Bearer {experiment_token(token, e.id)}"},
        )
    assert none.status_code == two.status_code == 422
    assert "exactly one of experiment, group or project" in none.text + two.text
    assert other.status_code == 422 and "tensorboard" in other.text and "notebook" in other.text
    assert notebook_of.status_code == 422 and "a notebook is a project's: give project" in notebook_of.text
    assert board_inputs.status_code == 422 and "inputs are a notebook's" in board_inputs.text
    assert no_data.status_code == 404 and "nothing" in no_data.json()["message"]
    assert model_and_project.status_code == 422 and "names its model only" in model_and_project.text
    assert no_model.status_code == 404 and "nothing" in no_model.json()["message"]
    assert empty.status_code == 404 and "has no experiment" in empty.json()["message"]
    assert gone.status_code == 404 and "service abcdef012345 does not exist" in gone.json()["message"]
    assert replica.status_code == 403 and "replica token" in replica.json()["message"]


def test_the_proxy_forwards_no_credential_and_keeps_no_cookie(settings: ServerSettings, store: Store) -> None:
    tokens = make_team(store).tokens
    e = fill.experiment(store, project="A")
    with TestClient(create_app(settings, store), follow_redirects=False) as client:
        viewer = {"Authorization": f"Bearer {tokens['viewer_a']}"}
        board = client.post("/api/v1/services", json={"experiment": e.id}, headers=viewer).json()
        answer = client.get(
            f"{board['path']}data/runs?a=1&b=two", headers={**viewer, "Cookie": "phalanx_session=mine"}
        )
        bare = client.get(f"/services/{board['id']}", headers=viewer)
    assert answer.status_code == 200 and answer.text == "ok" and answer.headers["x-board"] == "fake"
    assert "set-cookie" not in answer.headers and "clear-site-data" not in answer.headers
    assert SEEN["path"] == f"/services/{board['id']}/data/runs?a=1&b=two"
    sent = {k.lower() for k in SEEN["headers"]}  # type: ignore[attr-defined]
    assert not sent & {"authorization", "cookie"}
    assert bare.status_code == 307 and bare.headers["location"] == f"/services/{board['id']}/"


def test_a_projects_notebook_is_its_editors_and_gets_its_inputs(
    settings: ServerSettings, store: Store
) -> None:
    tokens = make_team(store).tokens
    folder = settings.store.home.parent / "digits"
    folder.mkdir()
    (folder / "part-0.csv").write_text("7,1\n")
    catalog.add_dataset(store, "digits", str(folder), project="A", keep_in=settings.store.home / "kept")
    ask = {"kind": "notebook", "project": "A", "inputs": [{"name": "digits", "dataset": "digits@latest"}]}
    with TestClient(create_app(settings, store)) as client:  # a server that runs no notebooks
        off = client.post(
            "/api/v1/services", json=ask, headers={"Authorization": f"Bearer {tokens['editor_a']}"}
        )
    assert off.status_code == 403 and "phalanx server --notebooks" in off.json()["message"]
    with TestClient(create_app(settings.model_copy(update={"notebooks": True}), store)) as client:

        def post(role: str) -> Any:
            return client.post(
                "/api/v1/services", json=ask, headers={"Authorization": f"Bearer {tokens[role]}"}
            )

        viewer, outsider, editor, again = post("viewer_a"), post("admin_b"), post("editor_a"), post("admin_a")
        reach = client.get(
            f"{editor.json()['path']}api/status", headers={"Authorization": f"Bearer {tokens['viewer_a']}"}
        )
    assert viewer.status_code == 403 and "needs editor" in viewer.json()["message"]
    assert outsider.status_code == 404
    assert editor.status_code == 201 and editor.json()["kind"] == "notebook"
    assert (again.status_code, again.json()["id"]) == (200, editor.json()["id"])  # the project's one
    assert reach.status_code == 403  # its pages too: code runs there
    (path,) = STARTED_WITH.values()
    assert list(STARTED_WITH) == ["PHALANX_INPUT_DIGITS"]
    assert (Path(path) / "part-0.csv").read_text() == "7,1\n"


def test_a_project_runs_at_most_the_servers_limit_of_services(settings: ServerSettings, store: Store) -> None:
    tokens = make_team(store).tokens
    first, second = fill.experiment(store, project="A"), fill.experiment(store, project="A")
    app = create_app(settings.model_copy(update={"service_limit": 1}), store)
    with TestClient(app, headers={"Authorization": f"Bearer {tokens['viewer_a']}"}) as client:
        one = client.post("/api/v1/services", json={"experiment": first.id})
        again = client.post("/api/v1/services", json={"experiment": first.id})  # the one that runs
        two = client.post("/api/v1/services", json={"experiment": second.id})
    assert (one.status_code, again.status_code) == (201, 200)
    assert two.status_code == 429 and "1 service processes running" in two.json()["message"]
    assert "phalanx tensorboard ls" in two.json()["message"]


def test_a_board_of_a_deleted_experiment_stops_and_a_killed_servers_leftovers_go(
    settings: ServerSettings, store: Store, fake_boards: FakeBoard
) -> None:
    home = settings.store.home
    left = home / "services" / "0123456789ab"  # what a killed server's service left, and its socket folder
    listen = Path(tempfile.mkdtemp(prefix="phalanx-service-0123456789ab-"))
    left.mkdir(parents=True)
    (left / "listen").write_text(str(listen))
    e = fill.experiment(store, project="A")
    services = Services(store, home, lambda _: None, Timing(refresh_seconds=0.05)).start()
    try:
        assert not left.exists() and not listen.exists()
        service = services.add(fake_boards.make(store, "A", Target("experiment", e.id)))
        store.delete_experiment(e.id)
        deadline = time.monotonic() + 120  # a safety net: the refresher's next pass stops it
        while (services.listed() or service.alive()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert services.listed() == [] and not service.alive()
    finally:
        services.close()


def test_a_served_models_replicas_take_turns_and_one_that_died_is_skipped(tmp_path: Path) -> None:
    processes = [FakeProcess(), FakeProcess(), FakeProcess()]
    sockets = [tmp_path / f"{n}.sock" for n in range(3)]
    service = Service(
        id="0123456789ab",
        kind="model",
        project="A",
        target=Target("model", "digits@prod"),
        folder=tmp_path,
        instances=[Instance(s, p) for s, p in zip(sockets, processes, strict=True)],
        board=None,
        started_by="ada",
    )
    assert [service.in_turn()[0] for _ in range(4)] == [sockets[0], sockets[1], sockets[2], sockets[0]]
    processes[1].end()
    firsts = [service.in_turn() for _ in range(4)]
    assert all(sockets[1] not in order and len(order) == 2 for order in firsts)  # the others, in turn
    assert {order[0] for order in firsts} == {sockets[0], sockets[2]}
    for process in processes:
        process.end()
    assert service.in_turn() == sockets and not service.alive()  # none runs: the request fails there


def test_replicas_are_a_served_models_only(settings: ServerSettings, store: Store) -> None:
    e = fill.experiment(store, project="A")
    token = "server-token-of-the-services-test-0123"
    app = create_app(settings.model_copy(update={"token": token}), store)
    with TestClient(app, headers={"Authorization": f"Bearer {token}"}) as client:
        board = client.post("/api/v1/services", json={"experiment": e.id, "replicas": 2})
        many = client.post("/api/v1/services", json={"kind": "model", "model": "digits", "replicas": 17})
    assert board.status_code == 422 and "replicas are a served model's" in board.text
    assert many.status_code == 422 and "16" in many.text


def test_build_is_a_notebooks_resources_not_a_boards_and_they_must_make_sense(
    settings: ServerSettings, store: Store
) -> None:
    e = fill.experiment(store, project="A")
    token = "server-token-of-the-services-test-0123"
    app = create_app(settings.model_copy(update={"token": token, "notebooks": True}), store)
    with TestClient(app, headers={"Authorization": f"Bearer {token}"}) as client:
        board_build = client.post(
            "/api/v1/services", json={"experiment": e.id, "build": {"pip_packages": ["x"]}}
        )
        board_size = client.post(
            "/api/v1/services", json={"experiment": e.id, "resources": {"cpu": {"limits": 1}}}
        )
        model_build = client.post(
            "/api/v1/services", json={"kind": "model", "model": "digits", "build": {"pip_packages": ["x"]}}
        )
        upside_down = client.post(
            "/api/v1/services",
            json={"kind": "notebook", "project": "A", "resources": {"cpu": {"requests": 2, "limits": 1}}},
        )
        no_core = client.post(
            "/api/v1/services", json={"kind": "notebook", "project": "A", "resources": {"cpu": {"limits": 0}}}
        )
        step = client.post(
            "/api/v1/services", json={"kind": "notebook", "project": "A", "build": {"build_steps": "pip x"}}
        )
        board_code = client.post("/api/v1/services", json={"experiment": e.id, "code": "AAAA"})
        not_base64 = client.post("/api/v1/services", json={"kind": "notebook", "project": "A", "code": "%%%"})
        not_a_bundle = client.post(
            "/api/v1/services",
            json={"kind": "notebook", "project": "A", "code": base64.b64encode(b"plain text").decode()},
        )
        odd = [
            client.post(
                "/api/v1/services",
                content='{"kind": "notebook", "project": "A", ' + extra + "}",
                headers={"Content-Type": "application/json"},
            )
            for extra in (
                '"resources": {"cpu": {"limits": 1e400}}',  # a number JSON readers take as infinity
                '"resources": {"gpu": {"limits": 1.5}}',
                '"resources": {"disk": {"limits": 1}}',
                '"build": {"env_vars": {"A=B": "x"}}',
                '"build": {"env_var": {"A": "x"}}',
                '"build": {"pip_packages": ["numpy\\u0000"]}',
            )
        ]
    assert board_build.status_code == 422 and "build and code are a notebook's" in board_build.text
    assert model_build.status_code == 422 and "build and code are a notebook's" in model_build.text
    assert board_size.status_code == 422 and "a board has none" in board_size.text
    assert upside_down.status_code == 422 and "limits must be at least the requests" in upside_down.text
    assert no_core.status_code == 422 and "greater than 0" in no_core.text
    assert step.status_code == 422 and "build_steps" in step.text
    assert [r.status_code for r in odd] == [422] * 6, [r.text for r in odd]
    assert board_code.status_code == 422 and "code are a notebook's" in board_code.text
    assert not_base64.status_code == 400 and "not base64" in not_base64.json()["message"]
    assert not_a_bundle.status_code == 400 and "not a readable .tar.gz" in not_a_bundle.json()["message"]
    assert "whole devices" in odd[1].text and "not a variable name" in odd[3].text and "NUL" in odd[5].text


def test_a_served_model_is_handed_back_while_its_processes_start_again_and_counts_each_replica(
    settings: ServerSettings, store: Store
) -> None:
    e = fill.experiment(store, project="A")
    make_model(store, "digits", e.id, "A")
    token = "server-token-of-the-services-test-0123"
    limited = settings.model_copy(update={"token": token, "service_limit": 3})
    with TestClient(create_app(limited, store), headers={"Authorization": f"Bearer {token}"}) as client:
        served = client.post("/api/v1/services", json={"kind": "model", "model": "digits", "replicas": 2})
        service = client.app.state.services.get(served.json()["id"])  # type: ignore[attr-defined]
        for instance in service.instances:  # every replica died (the refresher starts them again)
            instance.process.end()
        again = client.post("/api/v1/services", json={"kind": "model", "model": "digits", "replicas": 3})
        board = client.post("/api/v1/services", json={"experiment": e.id})  # the 3rd process: fits
        over = client.post("/api/v1/services", json={"kind": "model", "model": "digits@1", "replicas": 1})
        text = client.post("/api/v1/services", json={"kind": "model", "model": "digits", "replicas": "2"})
    assert (served.status_code, served.json()["replicas"]) == (201, 2)
    assert (again.status_code, again.json()["id"], again.json()["replicas"]) == (200, served.json()["id"], 2)
    assert board.status_code == 201
    assert (
        over.status_code == 429 and "3 service processes running and this needs 1" in over.json()["message"]
    )
    assert text.status_code == 422  # a number, not a string that looks like one


def test_a_replica_that_cannot_start_again_is_retried_while_another_serves(
    settings: ServerSettings, store: Store
) -> None:
    e = fill.experiment(store, project="A")
    make_model(store, "digits", e.id, "A")
    services = Services(store, settings.store.home, lambda _: None, Timing(refresh_seconds=0.05)).start()
    try:
        RESPAWN_FAILS.append(True)
        service, _ = services.model(parse_ref("digits"), "ada", replicas=2)
        service.instances[0].process.end()
        deadline = time.monotonic() + 120  # a safety net: the refresher's passes try it
        while RESPAWNED.count(0) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert RESPAWNED.count(0) >= 2 and services.listed() == [service]  # tried again, still served
        service.instances[1].process.end()  # none serves now, and none starts: it stops
        while services.listed() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert services.listed() == []
    finally:
        services.close()
