"""Quotas on a real server's submissions: a project at its core quota waits (the queue route says so),
and a submit beyond its max-waiting is answered 429 and starts nothing."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from tests.integration.server.serverproc import TRUSTING, Server, start_server, stop_server, supervisors_gone
from tests.integration.server.test_submit import TOKEN, wait_done

from phalanx.bundles import pack
from phalanx.cli.remote import Client
from phalanx.errors import UsageError


@pytest.fixture
def server(phalanx_home: Path) -> Any:
    s = start_server(phalanx_home, token=TOKEN, args=TRUSTING)
    try:
        yield s
        supervisors_gone(s)
    finally:
        stop_server(s.proc)


def test_a_project_at_its_quota_waits_and_one_more_is_429(server: Server, tmp_path: Path) -> None:
    release = tmp_path / "release"
    folder = tmp_path / "code"
    folder.mkdir()
    hold = (
        "import pathlib, time; end = time.time() + 300\n"
        f"while not pathlib.Path({str(release)!r}).exists() and time.time() < end: time.sleep(0.05)\n"
    )
    (folder / "hold.py").write_text(hold)
    exp = folder / "exp.yml"
    exp.write_text(
        "version: 1\nkind: experiment\nproject: vision\n"
        "environment:\n  resources:\n    cpu: {limits: 1}\nrun:\n  cmd: python hold.py\n"
    )
    client = Client(server.url, TOKEN)
    body = json.dumps({"cores": 1, "max_waiting": 1}).encode()
    client.request("PUT", "/projects/vision/quota", body, {"Content-Type": "application/json"})
    bundle = pack(folder)
    first = client.submit(exp, bundle, {}, 0)["id"]
    second = client.submit(exp, bundle, {}, 0)["id"]

    def queued() -> list[dict[str, Any]]:
        return list(client.get("/queue")["queued"])

    # the launcher starts both at once (2 workers): whichever supervisor reaches the queue second
    # waits (the queue is first come, first served by arrival there, docs/server.md)
    deadline = time.monotonic() + 240
    while not any(r["experiment_id"] in (first, second) for r in queued()):
        assert time.monotonic() < deadline, "neither submission queued"
        time.sleep(0.2)
    (row,) = queued()
    assert row["why"] == "project vision at its 1-core quota" and row["project"] == "vision"
    waiting = row["experiment_id"]
    assert [r["experiment_id"] for r in client.get("/queue")["running"]] == [
        ({first, second} - {waiting}).pop()
    ]
    with pytest.raises(UsageError, match="too many waiting experiments: project vision already has 1"):
        client.submit(exp, bundle, {}, 0)
    assert len(client.get("/experiments", limit=50)["items"]) == 2  # the refused one made nothing
    release.touch()
    assert wait_done(server, first)["status"] == "succeeded"
    assert wait_done(server, second)["status"] == "succeeded"
