"""What a team server's caller learns about other projects through the run table's helpers: the
column chooser lists only their projects' param keys and metric titles, an id prefix is resolved
only among their projects' experiments (another project's ids neither make it ambiguous nor are
found by it), and the groups list shows only their projects' groups, launched by anybody."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from phalanx.store.base import Store
from tests.unit.server import fill
from tests.unit.server.teams_fixtures import Team, make_group, make_team


@pytest.fixture
def team(store: Store) -> Team:
    return make_team(store)


def _as(team: Team, role: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {team.tokens[role]}"}


def test_the_column_chooser_lists_only_the_callers_projects_names(
    client: TestClient, team: Team, store: Store
) -> None:
    a, b = fill.experiment(store, project="A"), fill.experiment(store, project="B")
    fill.param(store, a.id, "Args", "lr", 0.1)
    fill.scalars(store, a.id, "loss", "train", [1.0])
    fill.param(store, b.id, "Args", "secret_b_key", 1)
    fill.scalars(store, b.id, "secret_b_metric", "train", [1.0])

    def columns(role: str) -> dict[str, list[str]]:
        r = client.get("/api/v1/columns", headers=_as(team, role))
        assert r.status_code == 200, r.text
        body: dict[str, list[str]] = r.json()
        return body

    assert columns("viewer_a") == {"params": ["lr"], "metrics": ["loss"]}
    assert columns("admin_b") == {"params": ["secret_b_key"], "metrics": ["secret_b_metric"]}
    assert columns("none") == {"params": [], "metrics": []}
    assert columns("root") == {"params": ["lr", "secret_b_key"], "metrics": ["loss", "secret_b_metric"]}


def _sharing_a_prefix(store: Store) -> tuple[str, str, str]:
    """An experiment in A and one in B whose ids share their first characters, and that prefix."""
    a = store.create_experiment(name="a", project="A", experiment_id="abc0000000a1").id
    b = store.create_experiment(name="b", project="B", experiment_id="abc0000000b2").id
    return a, b, "abc"


def test_an_id_prefix_names_only_the_callers_projects_experiments(
    client: TestClient, team: Team, store: Store
) -> None:
    a, b, prefix = _sharing_a_prefix(store)
    for role, mine in (("viewer_a", a), ("editor_a", a), ("admin_b", b)):
        r = client.get(f"/api/v1/experiments/{prefix}", headers=_as(team, role))
        assert r.status_code == 200 and r.json()["id"] == mine, (role, r.text)  # not 400 "ambiguous"
        r = client.get(f"/api/v1/experiments/{prefix}/params", headers=_as(team, role))
        assert r.status_code == 200, (role, r.text)  # the route reads the id the policy resolved
    r = client.get(f"/api/v1/experiments/{prefix}", headers=_as(team, "none"))
    assert r.status_code == 404 and "not a member" in r.text
    r = client.get(f"/api/v1/experiments/{b[:11]}", headers=_as(team, "viewer_a"))  # only B's
    assert r.status_code == 404 and "not a member" in r.text and b not in r.text
    r = client.get(f"/api/v1/experiments/{a}/diff/{prefix}", headers=_as(team, "viewer_a"))
    assert r.status_code == 200, r.text
    r = client.delete(f"/api/v1/experiments/{prefix}", headers=_as(team, "admin_a"))  # still too short
    assert r.status_code == 400 and "at least 8 characters" in r.json()["message"]
    r = client.get(f"/api/v1/experiments/{prefix}", headers=_as(team, "root"))  # sees both
    assert r.status_code == 400 and "ambiguous" in r.json()["message"]


def test_single_token_mode_still_says_a_prefix_is_ambiguous(client: TestClient, store: Store) -> None:
    _sharing_a_prefix(store)
    r = client.get("/api/v1/experiments/abc")
    assert r.status_code == 400 and "ambiguous" in r.json()["message"]


def test_groups_list_shows_only_the_callers_projects_groups(
    client: TestClient, team: Team, store: Store
) -> None:
    # groups made by the store directly, as `phalanx group run` on the server's machine makes them:
    # nobody recorded as their launcher, yet each shown only to its project's members
    ga, gb = make_group(store, "A"), make_group(store, "B")
    assert team.accounts.launched_by("group", ga.id) is None

    def listed(role: str) -> set[str]:
        r = client.get("/api/v1/groups", headers=_as(team, role))
        assert r.status_code == 200, r.text
        return {g["id"] for g in r.json()}

    assert listed("viewer_a") == {ga.id}
    assert listed("admin_b") == {gb.id}
    assert listed("none") == set()
    assert listed("root") == {ga.id, gb.id}
    assert client.get(f"/api/v1/groups/{gb.id}", headers=_as(team, "viewer_a")).status_code == 404


def test_a_group_id_prefix_names_only_the_callers_projects_groups(
    client: TestClient, team: Team, store: Store
) -> None:
    from sqlalchemy import text

    ga, gb = make_group(store, "A"), make_group(store, "B")
    with store.engine.begin() as conn:  # type: ignore[attr-defined]  # ids that share a prefix
        for group, new in ((ga, "fed0000000a1"), (gb, "fed0000000b2")):
            conn.execute(text("UPDATE groups SET id = :new WHERE id = :old"), {"new": new, "old": group.id})
    r = client.get("/api/v1/groups/fed", headers=_as(team, "viewer_a"))
    assert r.status_code == 200 and r.json()["id"] == "fed0000000a1", r.text  # not 400 "ambiguous"
    r = client.get("/api/v1/experiments", params={"group": "fed"}, headers=_as(team, "admin_b"))
    assert r.status_code == 200, r.text
    r = client.get("/api/v1/groups/fed0000000b", headers=_as(team, "viewer_a"))
    assert r.status_code == 404 and "not a member" in r.text
    r = client.get("/api/v1/groups/fed", headers=_as(team, "root"))  # sees both
    assert r.status_code == 400 and "ambiguous" in r.json()["message"]
