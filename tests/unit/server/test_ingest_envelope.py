"""What the envelope of a POSTed record may hold: its ``stream`` and ``replica`` end up in columns of
bounded length (stream 128, replica 64) that PostgreSQL enforces and SQLite does not, and
PostgreSQL cannot store a NUL in text. Such a record is a 400 naming the field on both stores,
never an internal error (500) on one of them."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from phalanx.config import Settings
from phalanx.server.app import create_app
from phalanx.server.settings import ServerSettings
from phalanx.store import open_store
from tests.support import postgres
from tests.unit.server import fill


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def api(request: pytest.FixtureRequest, phalanx_home: Path) -> Iterator[tuple[TestClient, str]]:
    db_url = None
    if request.param == "postgresql":
        reason = postgres.unavailable_reason()
        if reason:
            pytest.skip(reason)
        db_url = postgres.shared_postgres().create_database()
    store_settings = Settings(home=phalanx_home, db_url=db_url) if db_url else Settings(home=phalanx_home)
    store = open_store(store_settings)
    e = fill.experiment(store)
    settings = ServerSettings(store=store_settings, allowed_hosts=["testserver"])
    with TestClient(create_app(settings, store)) as c:
        yield c, e.id
    store.close()


def _log(exp: str, **envelope: Any) -> dict[str, Any]:
    return {
        "experiment_id": exp,
        "kind": "log",
        "data": {"lines": ["hello"]},
        "stream": "s-1",
        "seq": 0,
        "time": time.time(),
        **envelope,
    }


@pytest.mark.parametrize(
    ("envelope", "field"),
    [
        ({"stream": "s" * 129}, "stream"),
        ({"stream": "a\x00b"}, "stream"),
        ({"replica": "r" * 65}, "replica"),
        ({"replica": "worker\x000"}, "replica"),
        ({"role": "w\x00"}, "role"),
    ],
)
def test_a_record_whose_envelope_no_store_can_hold_is_refused(
    api: tuple[TestClient, str], envelope: dict[str, Any], field: str
) -> None:
    client, exp = api
    r = client.post("/api/v1/ingest", json={"events": [_log(exp, **envelope)]})
    assert r.status_code == 400, r.text
    assert field in r.json()["message"]
    ok = client.post("/api/v1/ingest", json={"events": [_log(exp, seq=1)]})
    assert ok.status_code == 200 and ok.json() == {"accepted": 1}


def _created(exp: str, data: dict[str, Any]) -> dict[str, Any]:
    return {"experiment_id": exp, "kind": "experiment", "data": data, "stream": "c-1", "seq": 0}


@pytest.mark.parametrize(
    ("exp", "data", "field"),
    [
        ("a" * 33, {"name": "x"}, "experiment id"),
        ("plain1", {"name": 5}, "name"),
        ("plain3", {"name": "x", "project": ["p"]}, "project"),
        ("plain4", {"name": "x", "framework": {"a": 1}}, "framework"),
        ("plain5", {"name": "x", "tags": "notalist"}, "tags"),
        ("plain6", {"name": "x", "tags": [{"a": 1}]}, "tags"),
        ("plain7", {"name": "x", "pid": "abc"}, "pid"),
        ("plain8", {"name": "x", "host": ["h"]}, "host"),
    ],
)
def test_a_plain_script_experiment_record_either_store_cannot_hold_is_refused(
    api: tuple[TestClient, str], exp: str, data: dict[str, Any], field: str
) -> None:
    client, _ = api
    r = client.post("/api/v1/ingest", json={"events": [_created(exp, data)]})
    assert r.status_code == 400, r.text
    assert field in r.json()["message"]
    assert client.get(f"/api/v1/experiments/{exp}").status_code == 404


@pytest.mark.parametrize(
    ("data", "said"),
    [
        ({"name": "n" * 300}, "the name is 300 characters long; at most 128"),
        ({"name": "two\nlines"}, "control character"),
        ({"project": "p\x00q"}, "the project 'p\\x00q' holds a control character"),
        ({"tags": ["t" * 150]}, "the tag is 150 characters long; at most 100"),
    ],
)
def test_a_name_project_or_tag_that_would_break_tables_is_a_400(
    api: tuple[TestClient, str], data: dict[str, Any], said: str
) -> None:
    """Names with a newline or of hundreds of characters were stored as given (or cut) and broke
    tables and log lines; Task.init refuses them first, the API answers 400 and records nothing."""
    client, _ = api
    r = client.post("/api/v1/ingest", json={"events": [_created("plainlong", {"name": "ok", **data})]})
    assert r.status_code == 400 and said in r.json()["message"], r.text
    assert client.get("/api/v1/experiments/plainlong").status_code == 404


def test_a_host_too_long_for_its_column_is_cut_not_lost(api: tuple[TestClient, str]) -> None:
    client, _ = api
    r = client.post(
        "/api/v1/ingest", json={"events": [_created("plainlong", {"name": "n", "host": "h" * 300})]}
    )
    assert r.status_code == 200, r.text
    assert client.get("/api/v1/experiments/plainlong").json()["name"] == "n"


@pytest.mark.parametrize(
    "data",
    [
        {"status": "failed", "replica_state": "bogus"},
        {"status": "failed", "exit_code": "abc"},
        {"status": "failed", "exit_code": 2**40},
        {"status": "failed", "reason": {"why": "oom"}},
        {"status": "failed", "replica_state": "failed", "replica_reason": ["oom"]},
        {"status": "failed", "replica_state": "failed", "replica_exit_code": "one"},
    ],
)
def test_a_malformed_status_record_of_a_plain_script_is_a_400(
    api: tuple[TestClient, str], data: dict[str, Any]
) -> None:
    """A status record's replica_state and exit_code were converted inside the store's transaction:
    a bad one was an internal error (500)."""
    client, _ = api
    assert (
        client.post("/api/v1/ingest", json={"events": [_created("plainst", {"name": "s"})]}).status_code
        == 200
    )
    status = {**_created("plainst", data), "kind": "status", "seq": 1}
    r = client.post("/api/v1/ingest", json={"events": [status]})
    assert r.status_code == 400, r.text
    assert client.get("/api/v1/experiments/plainst").json()["status"] == "running"


def test_log_lines_given_as_text_are_refused_not_stored_a_character_a_line(
    api: tuple[TestClient, str],
) -> None:
    client, exp = api
    bad = {**_log(exp), "data": {"lines": "hello"}}
    r = client.post("/api/v1/ingest", json={"events": [bad]})
    assert r.status_code == 400 and "lines" in r.json()["message"]
    assert client.get(f"/api/v1/experiments/{exp}/logs").json()["lines"] == []


@pytest.mark.parametrize(
    ("kind", "data", "field"),
    [
        ("text", {"title": "notes", "text": {"epoch": 1}}, "data.text"),
        ("text", {"title": ["notes"], "text": "x"}, "data.title"),
        ("artifact", {"name": "a", "path": "a.txt", "kind": {"k": "file"}}, "data.kind"),
        ("artifact", {"name": "a", "path": "a.txt", "kind": "k" * 17}, "data.kind"),
        (
            "artifact",
            {"name": "a", "path": "a.txt", "content_type": "text/" + "c" * 124},
            "data.content_type",
        ),
        ("artifact", {"name": {"n": 1}, "path": "a.txt"}, "data.name"),
        ("artifact", {"name": "a", "path": {"p": "a.txt"}}, "data.path"),
        ("artifact", {"name": "a", "path": "a.txt", "metadata": [1]}, "data.metadata"),
        ("model", {"name": "m", "path": "m.pt", "format": {"f": 1}}, "data.format"),
        ("model", {"name": "m", "path": "m.pt", "format": "f" * 33}, "data.format"),
        ("log", {"lines": ["ok", {"line": 1}]}, "data.lines[1]"),
        ("log", {"lines": ["ok"], "stream": {"s": 1}}, "data.stream"),
        ("log", {"lines": ["ok"], "stream": "s" * 17}, "data.stream"),
        ("log", {"text": ["ok"]}, "data.text"),
        ("param", {"section": {"s": 1}, "values": {"lr": 0.1}}, "data.section"),
        ("param", {"values": ["lr", 0.1]}, "data.values"),
    ],
)
def test_a_field_of_the_wrong_json_type_or_too_long_for_its_column_is_a_400_naming_it(
    api: tuple[TestClient, str], kind: str, data: dict[str, Any], field: str
) -> None:
    """It used to be stored as its Python text ("{'epoch': 1}"), or on PostgreSQL refused with a
    message about 64-bit integers; the batch is refused whole, so nothing of it is stored."""
    client, exp = api
    good = _log(exp)
    bad = {**_log(exp), "kind": kind, "data": data, "seq": 1}
    r = client.post("/api/v1/ingest", json={"events": [good, bad]})
    assert r.status_code == 400, r.text
    assert field in r.json()["message"], r.json()
    assert client.get(f"/api/v1/experiments/{exp}/logs").json()["lines"] == []


def test_a_console_line_longer_than_the_sdks_cap_is_cut_visibly_and_its_batch_kept(
    api: tuple[TestClient, str],
) -> None:
    """The SDK and the local console cut a line (and a report_text) at TEXT_LIMIT characters with
    a marker; the server does the same for records that did not come through them, instead of
    storing a 5 MB line or refusing the batch (which would lose its other records)."""
    from phalanx.tracking.screen import TEXT_LIMIT

    client, exp = api
    long_line = "x" * (TEXT_LIMIT + 5000)
    log = {**_log(exp), "data": {"lines": ["before", long_line, "after"]}}
    text = {**_log(exp), "kind": "text", "seq": 1, "data": {"title": "notes", "text": "y" * (TEXT_LIMIT + 7)}}
    r = client.post("/api/v1/ingest", json={"events": [log, text]})
    assert r.status_code == 200 and r.json() == {"accepted": 2}, r.text[:200]
    lines = [line["text"] for line in client.get(f"/api/v1/experiments/{exp}/logs").json()["lines"]]
    assert lines[0] == "before" and lines[2] == "after"
    # the marker on the same line: a newline in a stored line shows as a line naming no replica
    assert lines[1] == "x" * TEXT_LIMIT + " [truncated by phalanx: 5000 more characters]"
    (note,) = client.get(f"/api/v1/experiments/{exp}/texts").json()
    assert note["text"].endswith("[truncated by phalanx: 7 more characters]")


@pytest.mark.parametrize(
    ("envelope", "field"),
    [
        ({"seq": 1.5}, "seq"),  # was read as seq 1, taken for a re-sent event: dropped with a 200
        ({"seq": "abc"}, "seq"),
        ({"seq": True}, "seq"),
        ({"rank": "zero"}, "rank"),
        ({"attempt": "one"}, "attempt"),
        ({"index": 0.5}, "index"),
        ({"time": "now"}, "time"),
        ({"experiment_id": 5}, "experiment_id must be text"),
    ],
)
def test_a_record_with_a_number_of_the_wrong_type_is_refused_naming_it(
    api: tuple[TestClient, str], envelope: dict[str, Any], field: str
) -> None:
    client, exp = api
    assert client.post("/api/v1/ingest", json={"events": [_log(exp, seq=1)]}).json() == {"accepted": 1}
    r = client.post("/api/v1/ingest", json={"events": [_log(exp, **envelope)]})
    assert r.status_code == 400, r.text
    assert field.split()[0] in r.json()["message"]
    assert "must be" in r.json()["message"]


@pytest.mark.parametrize(
    ("data", "where"),
    [
        ({"title": "loss", "series": "s", "value": 1.0, "iteration": 2**80}, f"events[1]: step {2**80} "),
        ({"title": "loss", "series": "s", "value": 1.0, "step": str(-(2**70))}, "events[1]: step -"),
        ({"points": [["loss", "s", 0, 1.0], ["loss", "s", 2**64, 2.0]]}, "events[1]: points[1] step"),
    ],
)
def test_a_step_beyond_64_bits_is_a_400_naming_the_record_and_point(
    api: tuple[TestClient, str], data: dict[str, Any], where: str
) -> None:
    """Which of a thousand records (and which of its points) holds the bad step is what the sender
    needs to fix it; the store's own error could only say that some number was too big."""
    client, exp = api
    bad = {**_log(exp), "kind": "scalar", "data": data, "seq": 1}
    r = client.post("/api/v1/ingest", json={"events": [_log(exp), bad]})
    assert r.status_code == 400, r.text
    assert r.json()["message"].startswith(where) and "64-bit" in r.json()["message"], r.json()
    assert client.get(f"/api/v1/experiments/{exp}/logs").json()["lines"] == []  # refused whole
