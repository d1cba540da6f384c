"""Declared params (section Declared: the file's params after --param; Trial for a group's trials)
are the experiment's params: `param:KEY` reads them when the script reported none, and a declared
value the script reported differently is shown on both sides (API, `phalanx params`, `get`)."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from phalanx.cli.main import main
from phalanx.store.base import Store
from tests.unit.server import fill


def cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The command's output, as a user sees it (it ends with exit status 0)."""
    with pytest.raises(SystemExit) as done:
        main(args)
    assert done.value.code in (0, None)
    return capsys.readouterr().out


@pytest.fixture
def runs(store: Store) -> tuple[str, str]:
    clash = fill.experiment(store, name="clash")
    fill.param(store, clash.id, "Declared", "lr", 0.5)
    fill.param(store, clash.id, "General", "lr", 0.1)  # the script connected its own lr
    fill.param(store, clash.id, "Declared", "bs", 32)
    fill.param(store, clash.id, "Args", "bs", "32")  # argparse's text: the same value
    quiet = fill.experiment(store, name="quiet")  # a script that reports no params at all
    fill.param(store, quiet.id, "Declared", "lr", 0.5)
    return clash.id, quiet.id


def test_a_key_reads_what_the_script_reported_and_else_what_was_declared(
    client: TestClient, runs: tuple[str, str]
) -> None:
    clash, quiet = runs
    page = client.get("/api/v1/experiments", params={"column": ["param:lr", "param:Declared/lr"]}).json()
    assert {e["id"]: e["columns"] for e in page["items"]} == {
        clash: {"param:lr": 0.1, "param:Declared/lr": 0.5},
        quiet: {"param:lr": 0.5, "param:Declared/lr": 0.5},
    }
    kept = client.get("/api/v1/experiments", params={"where": "param:lr >= 0.5"}).json()
    assert [e["id"] for e in kept["items"]] == [quiet]
    declared = client.get("/api/v1/experiments", params={"where": "param:Declared/lr >= 0.5"}).json()
    assert {e["id"] for e in declared["items"]} == {clash, quiet}


def test_a_conflict_is_shown_on_both_sides_and_only_where_values_differ(
    client: TestClient, runs: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    clash, quiet = runs
    rows = {
        (p["section"], p["key"]): p["conflict"]
        for p in client.get(f"/api/v1/experiments/{clash}/params").json()
    }
    assert rows == {
        ("Declared", "lr"): "the script reported General 0.1",
        ("General", "lr"): "declared 0.5 (Declared)",
        ("Declared", "bs"): None,
        ("Args", "bs"): None,
    }
    assert all(p["conflict"] is None for p in client.get(f"/api/v1/experiments/{quiet}/params").json())
    table = cli(["params", clash, "--local"], capsys)
    assert "CONFLICT" in table.splitlines()[0] and "≠ declared 0.5 (Declared)" in table
    said = cli(["get", clash, "--local"], capsys)
    assert "conflict: lr declared Declared 0.5, the script reported General 0.1" in said
    doc = json.loads(cli(["get", clash, "--local", "-o", "json"], capsys))
    assert doc["param_conflicts"] == [
        {
            "key": "lr",
            "declared": {"section": "Declared", "value": 0.5},
            "reported": [{"section": "General", "value": 0.1, "replica": "master", "rank": 0}],
        }
    ]
