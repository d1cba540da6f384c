"""A filter the grammar cannot read is refused the same way at every door, naming the position:
400 from the API's run table (and its CSV), exit status 2 with one line from `phalanx ls --where`
(no traceback), FilterError from search_experiments. The table is store/test_filters.py's."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

import phalanx
from phalanx.cli.main import main
from phalanx.config import Settings
from phalanx.server.app import create_app
from phalanx.server.settings import ServerSettings
from phalanx.store import open_store
from phalanx.store.filters import FilterError
from tests.unit.server import fill
from tests.unit.store.test_filters import MALFORMED


@pytest.fixture
def client(phalanx_home: Path) -> TestClient:
    store = open_store(Settings(home=phalanx_home))
    e = fill.experiment(store, name="one")
    fill.param(store, e.id, "Args", "lr", 0.1)
    settings = ServerSettings(store=Settings(home=phalanx_home), allowed_hosts=["testserver"])
    return TestClient(create_app(settings, store))


def ls_where(text: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """`phalanx ls --local --where TEXT` as a user runs it: its exit status and what it wrote."""
    with pytest.raises(SystemExit) as done:
        main(["ls", "--local", "--where", text])
    out = capsys.readouterr()
    return int(done.value.code or 0), out.err


def test_every_door_refuses_a_malformed_filter_with_its_position(
    client: TestClient, capsys: pytest.CaptureFixture[str]
) -> None:
    for text, position, says in MALFORMED:
        for path in ("/api/v1/experiments", "/api/v1/experiments.csv"):
            r = client.get(path, params={"where": text})
            assert r.status_code == 400, (text, r.status_code)
            assert f"position {position}:" in r.json()["message"] and says in r.json()["message"]
        status, said = ls_where(text, capsys)
        assert status == 2 and "\nerror: filter" in said and "Traceback" not in said, (text, said)
        assert f"position {position}:" in said and says in said, said
        with pytest.raises(FilterError, match=f"position {position}:"):
            phalanx.search_experiments(text, local=True)


def test_text_against_a_number_column_and_an_unknown_key_are_refused_with_a_hint(
    client: TestClient, capsys: pytest.CaptureFixture[str]
) -> None:
    r = client.get("/api/v1/experiments", params={"where": "param:lr > abc"})
    assert r.status_code == 400 and "position 12: param:lr is a number" in r.json()["message"]
    r = client.get("/api/v1/experiments", params={"where": "param:lrr > 0.1"})
    assert r.status_code == 400 and "did you mean param:lr?" in r.json()["message"]
    status, said = ls_where("param:lrr > 0.1", capsys)
    assert status == 2 and "did you mean param:lr?" in said
