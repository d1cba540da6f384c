"""`phalanx run` and `rerun` print one `-o json` document on both doors: a real `phalanx
server` on loopback (after `phalanx login`) and this machine (`--local`), started in the
foreground, in the background (`-d`) and on the server (with and without `--follow`). Every key is
on every door, in the same order (docs/running.md, "What `-o json` prints"); what only one door
knows is null on the other."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.integration.server.serverproc import Server, start_server, stop_server, supervisors_gone
from tests.integration.server.test_remote_commands import (
    DATA,
    TOKEN,
    finish,
    ok,
    phalanx,
    phalanx_process,
    phalanx_start,
    wait_done,
)

KEYS = ["id", "status", "reason", "server", "supervisor_pid", "log"]
STATES = {"created", "queued", "building", "starting", "running", "succeeded"}


@pytest.fixture
def server(phalanx_home: Path) -> Iterator[Server]:
    s = start_server(phalanx_home, token=TOKEN)
    try:
        yield s
        supervisors_gone(s)
    finally:
        stop_server(s.proc)


def document(stdout: str) -> dict[str, Any]:
    """The whole of stdout is the one JSON document (console lines go to stderr)."""
    doc = json.loads(stdout)
    assert list(doc) == KEYS, doc
    return dict(doc)


def test_run_and_rerun_print_one_json_document_on_both_doors(server: Server, tmp_path: Path) -> None:
    project = tmp_path / "project"
    shutil.copytree(DATA, project)
    exp = str(project / "exp.yml")
    laptop = tmp_path / "laptop-home"
    ok(phalanx(laptop, "login", server.url, "--token", TOKEN))

    # the runs on this machine in the foreground are processes of their own, started first: the
    # test goes on with the other doors meanwhile and reads their documents once they end
    here_run = phalanx_start(laptop, "run", "-f", exp, "--local", "-o", "json")
    # the server: answered once it is written, or (--follow) once it has ended
    there = document(ok(phalanx(laptop, "run", "-f", exp, "-o", "json")).stdout)
    assert there["status"] in STATES and there["server"] == server.url
    assert (there["supervisor_pid"], there["log"]) == (None, None)
    followed = ok(phalanx(laptop, "run", "-f", exp, "--follow", "-o", "json"))

    # this machine: to its end in the foreground, then in the background
    here = document(ok(finish(here_run)).stdout)
    assert (here["status"], here["reason"], here["server"], here["supervisor_pid"]) == (
        "succeeded",
        None,
        None,
        None,
    )
    rerun_here_run = phalanx_start(laptop, "rerun", here["id"], "--local", "-o", "json")
    here_d = document(ok(phalanx_process(laptop, "run", "-f", exp, "--local", "-d", "-o", "json")).stdout)
    assert here_d["status"] in STATES and here_d["server"] is None
    assert isinstance(here_d["supervisor_pid"], int) and Path(here_d["log"]).name == "supervisor.log"
    rerun_here_d = document(
        ok(phalanx_process(laptop, "rerun", here["id"], "--local", "-d", "-o", "json")).stdout
    )
    assert rerun_here_d["status"] in STATES and isinstance(rerun_here_d["supervisor_pid"], int)

    there_f = document(followed.stdout)
    assert "hello from the script" in followed.stderr  # the console, kept off the document
    assert {k: v for k, v in there_f.items() if k != "id"} == {
        **{k: v for k, v in here.items() if k != "id"},
        "server": server.url,
    }
    rerun_there = document(ok(phalanx(laptop, "rerun", there["id"], "-o", "json")).stdout)
    assert rerun_there["status"] in STATES and rerun_there["server"] == server.url

    rerun_here = document(ok(finish(rerun_here_run)).stdout)
    assert rerun_here["status"] == "succeeded" and rerun_here["id"] not in (here["id"], here_d["id"])
    for exp_id in (here_d["id"], rerun_here_d["id"]):
        assert wait_done(laptop, exp_id, "--local")["status"] == "succeeded"
    for exp_id in (there["id"], rerun_there["id"]):
        assert wait_done(laptop, exp_id)["status"] == "succeeded"
