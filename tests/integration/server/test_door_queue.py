"""One door for `phalanx queue`: from a laptop home logged in to a real `phalanx server` on loopback,
it shows the server's queue with the reason a run waits (its project's quota), in the shape the
server's own machine prints (`-o json`: the same keys), and says on stderr which door it used; a
command of this machine only (`gc`, `sync`) refuses --server with exit status 2. A run that waits
longer than PHALANX_WAIT_NOTICE is told to its project's alert hook, with why it waits.

One server, two short jobs: a 1-core quota on project vision makes the second submit wait; a
release file ends both. The CLI commands run in this process (tests/support/cli.py)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from tests.integration.server.serverproc import TRUSTING, Server, start_server, stop_server, supervisors_gone
from tests.integration.server.test_remote_commands import ok, phalanx
from tests.integration.server.test_submit import TOKEN, wait_done
from tests.support.webhooks import ALLOW_LOOPBACK, Receiver

from phalanx.bundles import pack
from phalanx.cli.remote import Client

HOLD = (
    "import pathlib, sys, time; end = time.time() + 300\n"
    "while not pathlib.Path(sys.argv[1]).exists() and time.time() < end: time.sleep(0.05)\n"
)
WHY = "project vision at its 1-core quota"


@pytest.fixture
def server(phalanx_home: Path) -> Any:
    s = start_server(phalanx_home, token=TOKEN, args=TRUSTING)
    try:
        yield s
        supervisors_gone(s)
    finally:
        stop_server(s.proc)


def _one_waits(server: Server, tmp_path: Path) -> tuple[Client, list[str], str, Path]:
    """Two submits to project vision at a 1-core quota: one runs, the other waits. The client, both
    ids, the waiting one's and the file that ends them."""
    release = tmp_path / "release"
    code = tmp_path / "code"
    code.mkdir()
    (code / "hold.py").write_text(HOLD)
    exp = code / "exp.yml"
    exp.write_text(
        "version: 1\nkind: experiment\nproject: vision\n"
        f"environment:\n  resources:\n    cpu: {{limits: 1}}\nrun:\n  cmd: python hold.py {release}\n"
    )
    client = Client(server.url, TOKEN)
    body = json.dumps({"cores": 1, "max_waiting": 1}).encode()
    client.request("PUT", "/projects/vision/quota", body, {"Content-Type": "application/json"})
    bundle = pack(code)
    ids = [client.submit(exp, bundle, {}, 0)["id"] for _ in range(2)]
    deadline = time.monotonic() + 240
    while not (queued := client.get("/queue")["queued"]):  # the launcher starts both; one waits
        assert time.monotonic() < deadline, "neither submission queued"
        time.sleep(0.2)
    (row,) = queued
    return client, ids, row["experiment_id"], release


def _keys(doc: dict[str, Any]) -> dict[str, list[str]]:
    """The doc's keys and each list's rows' keys: what both doors must share."""
    shape = {"": sorted(doc)}
    for part in ("running", "queued", "elsewhere", "projects"):
        shape.update({f"{part}[{i}]": sorted(row) for i, row in enumerate(doc[part])})
    return shape


def test_queue_from_a_laptop_shows_the_servers_waiting_run_with_its_reason(
    server: Server, tmp_path: Path
) -> None:
    _, ids, waiting, release = _one_waits(server, tmp_path)
    laptop = tmp_path / "laptop-home"
    ok(phalanx(laptop, "login", server.url, "--token", TOKEN))
    try:
        table = ok(phalanx(laptop, "queue"))
        assert table.stderr == f"phalanx: on server {server.url}\n"
        lines = table.stdout.splitlines()
        assert lines[0].startswith(f"server {server.url}: ")
        (line,) = [x for x in lines if waiting in x]
        assert "queued" in line and line.endswith(WHY)

        remote = json.loads(ok(phalanx(laptop, "queue", "-o", "json")).stdout)
        # the server's own machine, its own door: the same keys and the same rows
        here = phalanx(server.home, "queue", "-o", "json", "--local")
        assert ok(here).stderr == "phalanx: on this machine\n"
        local = json.loads(here.stdout)
        assert _keys(remote) == _keys(local)
        for doc in (remote, local):
            assert [(r["experiment_id"], r["why"]) for r in doc["queued"]] == [(waiting, WHY)]
            assert [r["experiment_id"] for r in doc["running"]] == [i for i in ids if i != waiting]
        # with --local the laptop reads its own (empty) queue, in the same shape
        empty = ok(phalanx(laptop, "queue", "-o", "json", "--local"))
        assert sorted(json.loads(empty.stdout)) == sorted(remote)
        assert json.loads(empty.stdout)["queued"] == [] and empty.stderr == "phalanx: on this machine\n"
    finally:
        release.touch()
    assert [wait_done(server, i)["status"] for i in ids] == ["succeeded", "succeeded"]


def test_commands_of_this_machine_only_refuse_a_server_with_status_2(tmp_path: Path) -> None:
    laptop = tmp_path / "laptop-home"
    for command in ("gc", "sync"):
        r = phalanx(laptop, command, "--server", "http://127.0.0.1:9")
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert f"`phalanx {command}` acts on this machine only" in r.stderr and r.stdout == ""


def test_a_run_waiting_past_its_notice_is_told_to_its_projects_hook_with_why(
    phalanx_home: Path, tmp_path: Path
) -> None:
    server = start_server(
        phalanx_home, token=TOKEN, args=[*TRUSTING, *ALLOW_LOOPBACK], env={"PHALANX_WAIT_NOTICE": "1"}
    )
    try:
        with Receiver() as receiver:
            hook = json.dumps({"url": receiver.url, "events": ["waiting"]}).encode()
            Client(server.url, TOKEN).request(
                "POST", "/projects/vision/alerts", hook, {"Content-Type": "application/json"}
            )
            _, ids, waiting, release = _one_waits(server, tmp_path)
            try:
                (got,) = receiver.wait_for(1)
            finally:
                release.touch()
        body = json.loads(got.body)
        assert (body["event"], body["experiment_id"], body["replica"]) == (
            "experiment.waiting",
            waiting,
            None,
        )
        assert body["reason"].startswith("queued for ") and body["reason"].endswith(WHY), body["reason"]
        assert [wait_done(server, i)["status"] for i in ids] == ["succeeded", "succeeded"]
        supervisors_gone(server)
    finally:
        stop_server(server.proc)
