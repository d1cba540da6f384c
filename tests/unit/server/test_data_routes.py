"""The data catalog's routes apply the projects' rules (docs/data.md#on-a-server): an editor of a
project adds its datastores and datasets (the latter only from a datastore the project reads),
shared or project-less data is a server admin's, a viewer reads, another project sees nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from phalanx.server.app import create_app
from phalanx.server.settings import ServerSettings
from phalanx.store.base import LocalStore
from tests.unit.server.teams_fixtures import Team, make_team

API = "/api/v1"


@pytest.fixture
def team(store: LocalStore) -> Team:
    return make_team(store)


@pytest.fixture
def api(settings: ServerSettings, store: LocalStore, team: Team) -> Any:
    client = TestClient(create_app(settings, store))

    def call(who: str, method: str, path: str, body: Any = None) -> Any:
        return client.request(
            method, f"{API}{path}", json=body, headers={"Authorization": f"Bearer {team.tokens[who]}"}
        )

    return call


@pytest.fixture
def lake(tmp_path: Path) -> Path:
    folder = tmp_path / "lake"
    (folder / "digits").mkdir(parents=True)
    (folder / "digits" / "a.csv").write_text("1,2\n")
    return folder


def test_an_editor_adds_to_its_project_and_a_viewer_reads(api: Any, lake: Path) -> None:
    body = {"name": "lake", "url": str(lake), "project": "A"}
    assert api("viewer_a", "POST", "/datastores", body).status_code == 403
    assert api("admin_b", "POST", "/datastores", body).status_code == 404  # not B's to know about
    for url in ("/", "s3://someone-elses-bucket/x"):  # read with the server's own access
        r = api("editor_a", "POST", "/datastores", {**body, "url": url})
        assert r.status_code == 403 and "server admin" in r.json()["message"], r.json()
    r = api("root", "POST", "/datastores", body)
    assert r.status_code == 201 and r.json()["project"] == "A", r.json()
    r = api("editor_a", "POST", "/datasets", {"name": "digits", "source": "lake:digits", "project": "A"})
    assert r.status_code == 201 and r.json()["ref"] == "digits@1" and r.json()["new"], r.json()
    assert [d["name"] for d in api("viewer_a", "GET", "/datastores").json()] == ["lake"]
    assert api("viewer_a", "GET", "/datasets/digits/versions/latest").json()["version"] == 1
    assert api("admin_b", "GET", "/datastores").json() == []
    assert api("admin_b", "GET", "/datasets").json() == []
    assert api("admin_b", "GET", "/datasets/digits/versions/1").status_code == 404
    r = api("admin_b", "GET", "/datasets/digits/versions/9")  # nothing of A's versions or names
    assert r.status_code == 404 and "versions" not in r.json()["message"], r.json()
    r = api("admin_b", "GET", "/datasets/digitz/versions/latest")  # nor the name nearest a typo
    assert r.status_code == 404 and "digits'" not in r.json()["message"], r.json()
    r = api("viewer_a", "GET", "/datasets/digitz/versions/latest")  # its own project's: named
    assert r.status_code == 404 and "did you mean 'digits'?" in r.json()["message"], r.json()
    r = api("viewer_a", "GET", "/datasets/digits/versions/9")
    assert (
        r.status_code == 404 and "has no version 9 in your projects (versions: 1)" in r.json()["message"]
    ), r.json()
    r = api("admin_b", "GET", "/datastores/nope")
    assert r.status_code == 404 and "lake" not in r.json()["message"], r.json()
    r = api("admin_b", "GET", "/datastores/lakes")
    assert r.status_code == 404 and "lake" not in r.json()["message"].replace("'lakes'", ""), r.json()
    r = api("viewer_a", "GET", "/datastores/lakes")
    assert r.status_code == 404 and "did you mean 'lake'?" in r.json()["message"], r.json()
    assert api("viewer_a", "DELETE", "/datasets/digits").status_code == 403
    assert api("admin_b", "DELETE", "/datastores/lake").status_code == 404
    r = api("editor_a", "DELETE", "/datasets/digits?version=latest")
    assert r.status_code == 200 and [v["ref"] for v in r.json()] == ["digits@1"]
    assert api("editor_a", "DELETE", "/datastores/lake").status_code == 204  # A's: its editor's


def test_a_dataset_comes_from_a_datastore_the_project_reads(api: Any, lake: Path) -> None:
    assert (
        api("root", "POST", "/datastores", {"name": "blake", "url": str(lake), "project": "B"}).status_code
        == 201
    )
    r = api("editor_a", "POST", "/datasets", {"name": "d", "source": "blake:digits", "project": "A"})
    assert r.status_code == 404, r.json()  # B's datastore, as if it did not exist
    r = api("editor_a", "POST", "/datasets", {"name": "d", "source": str(lake), "project": "A"})
    assert r.status_code == 400 and "DATASTORE:sub/dir" in r.json()["message"], r.json()
    r = api("editor_a", "POST", "/datasets", {"name": "d", "source": "blake:../../etc", "project": "A"})
    assert r.status_code in (400, 404), r.json()


def test_shared_or_project_less_data_is_an_admins(api: Any, lake: Path) -> None:
    r = api(
        "editor_a", "POST", "/datastores", {"name": "pub", "url": str(lake), "shared": True, "project": "A"}
    )
    assert r.status_code == 403 and "server admin" in r.json()["message"], r.json()
    assert api("editor_a", "POST", "/datastores", {"name": "pub", "url": str(lake)}).status_code == 403
    r = api("root", "POST", "/datastores", {"name": "pub", "url": str(lake), "shared": True})
    assert r.status_code == 201, r.json()
    assert [d["name"] for d in api("admin_b", "GET", "/datastores").json()] == ["pub"]  # shared: seen
    r = api("editor_a", "POST", "/datasets", {"name": "d", "source": "pub:digits", "project": "A"})
    assert r.status_code == 201, r.json()  # a shared datastore is read by every project
    assert api("editor_a", "DELETE", "/datastores/pub").status_code == 403


def test_bad_input_is_answered_with_what_to_fix(api: Any, lake: Path) -> None:
    r = api("root", "POST", "/datastores", {"name": "rel", "url": "relative/path", "project": "A"})
    assert r.status_code == 400 and "absolute path" in r.json()["message"]
    r = api("root", "POST", "/datastores", {"name": "-bad", "url": str(lake), "project": "A"})
    assert r.status_code == 400 and "datastore name" in r.json()["message"]
    r = api("root", "POST", "/datastores", {"url": str(lake)})
    assert r.status_code == 422 and "name" in r.json()["message"]


def test_a_missing_version_names_only_the_versions_the_caller_reads(api: Any, lake: Path) -> None:
    # version 1 shared with every project, version 2 project A's own: B is told of 1 only
    assert (
        api("root", "POST", "/datastores", {"name": "lake", "url": str(lake), "project": "A"}).status_code
        == 201
    )
    body = {"name": "digits", "source": "lake:digits", "project": "A"}
    assert api("root", "POST", "/datasets", {**body, "shared": True}).status_code == 201
    (lake / "digits" / "b.csv").write_text("3,4\n")
    assert api("editor_a", "POST", "/datasets", body).json()["ref"] == "digits@2"
    r = api("admin_b", "GET", "/datasets/digits/versions/2")
    assert r.status_code == 404, r.json()
    assert r.json()["message"] == "dataset 'digits' has no version 2 in your projects (versions: 1)"
    r = api("admin_b", "GET", "/datasets/digits/versions/3")  # one that does not exist: the same words
    assert r.json()["message"] == "dataset 'digits' has no version 3 in your projects (versions: 1)"


def test_latest_is_the_newest_version_the_caller_reads(api: Any, lake: Path) -> None:
    # digits@1 shared, digits@2 A's own: B's latest is 1, and nothing says a newer one exists
    assert api("root", "POST", "/datastores", {"name": "lake", "url": str(lake), "project": "A"}).is_success
    body = {"name": "digits", "source": "lake:digits", "project": "A"}
    assert api("root", "POST", "/datasets", {**body, "shared": True}).json()["ref"] == "digits@1"
    (lake / "digits" / "b.csv").write_text("3,4\n")
    assert api("editor_a", "POST", "/datasets", body).json()["ref"] == "digits@2"
    for who, newest in (("admin_b", 1), ("none", 1), ("viewer_a", 2), ("root", 2)):
        for version in ("latest", str(newest)):
            r = api(who, "GET", f"/datasets/digits/versions/{version}")
            assert r.status_code == 200 and r.json()["version"] == newest, (who, r.json())
    r = api("admin_b", "GET", "/datasets/digits/versions/latest/files/a.csv")  # `data get --dir`
    assert r.status_code == 200 and r.content == b"1,2\n"
    assert api("admin_b", "GET", "/datasets/digits/versions/latest/files/b.csv").status_code == 404
    # a dataset of which the caller reads no version: latest is answered as a name that does not exist
    assert api("editor_a", "POST", "/datasets", {**body, "name": "private"}).json()["ref"] == "private@1"
    never = api("admin_b", "GET", "/datasets/privat3/versions/latest").json()["message"]
    for ref in ("private/versions/latest", "private/versions/1"):
        r = api("admin_b", "GET", f"/datasets/{ref}")
        assert r.status_code == 404 and r.json()["message"] == never.replace("privat3", "private")
    assert never == "no dataset 'privat3' in your projects", never


def test_readers_of_a_version_are_counted_among_the_callers_projects(
    api: Any, lake: Path, store: LocalStore
) -> None:
    assert (
        api("root", "POST", "/datastores", {"name": "lake", "url": str(lake), "project": "A"}).status_code
        == 201
    )
    body = {"name": "digits", "source": "lake:digits", "project": "A"}
    assert api("editor_a", "POST", "/datasets", body).status_code == 201
    read = {"name": "d", "kind": "dataset", "dataset": "digits", "version": 1, "ref": "digits@1"}
    for project in ("A", "A", "B"):
        store.create_experiment(name="train", project=project, plan={"inputs": [read]})
    assert api("viewer_a", "GET", "/datasets/digits/readers?versions=1").json() == {"experiments": 2}
    assert api("root", "GET", "/datasets/digits/readers").json() == {"experiments": 3}
    assert api("viewer_a", "GET", "/datasets/digits/readers?versions=2").json() == {"experiments": 0}
    assert api("admin_b", "GET", "/datasets/digits/readers").status_code == 404  # not B's to know about
    r = api("viewer_a", "GET", "/datasets/digits/readers?versions=x")
    assert r.status_code == 400 and "give version numbers" in r.json()["message"], r.json()


def test_a_name_another_project_holds_is_refused_without_naming_that_project(api: Any, lake: Path) -> None:
    """Dataset names are one namespace on a server: B cannot take A's name, and is not told whose it is."""
    for project, store_name in (("A", "lake"), ("B", "lakeb")):
        body = {"name": store_name, "url": str(lake), "project": project}
        assert api("root", "POST", "/datastores", body).is_success
    r = api("editor_a", "POST", "/datasets", {"name": "secretname", "source": "lake:digits", "project": "A"})
    assert r.status_code == 201, r.json()
    r = api("admin_b", "POST", "/datasets", {"name": "secretname", "source": "lakeb:digits", "project": "B"})
    assert r.status_code == 409, r.json()
    assert r.json()["message"] == (
        "dataset 'secretname': the name is taken by a project you are not a member of;"
        " record it under another name"
    ), r.json()
    # a caller who reads the owner is told whose it is (here: a server admin)
    r = api("root", "POST", "/datasets", {"name": "secretname", "source": "lakeb:digits", "project": "B"})
    assert r.status_code == 409 and "belongs to project A" in r.json()["message"], r.json()
