"""A team on a real server: an admin sets it up with `phalanx admin`, a member exchanges a password
for a token, submits, stops and deletes an experiment through the API, and `phalanx admin audit`
lists the submit, the stop and the delete in order, by that member; a viewer may do none of it."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.integration.server.serverproc import (
    PHALANX,
    Server,
    clean_env,
    start_server,
    stop_server,
    supervisors_gone,
)
from tests.integration.server.test_remote_commands import ok, phalanx
from tests.integration.server.test_submit import folder
from tests.support.cli import Done, phalanx_cli

from phalanx.bundles import pack
from phalanx.cli.remote import Client

SERVER_TOKEN = "team-setup-token-0123456789"


def admin(home: Path, *args: str, stdin: str = "", process: bool = False) -> str:
    """`phalanx admin ARGS` in this process (tests/support/cli.py), or as the `phalanx` script."""
    if process:
        r: Done | subprocess.CompletedProcess[str] = subprocess.run(
            [str(PHALANX), "admin", *args],
            env=clean_env(home),
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
        )
    else:
        unset: dict[str, str | None] = {k: None for k in os.environ if k.startswith("PHALANX_")}
        r = phalanx_cli("admin", *args, env={**unset, "PHALANX_HOME": str(home)}, input=stdin)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def call(server: Server, method: str, path: str, token: str | None, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"{server.url}/api/v1{path}", data=data, method=method)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            text = r.read()
            return r.status, json.loads(text) if text else None
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def token_of(server: Server, user: str, password: str) -> str:
    status, out = call(
        server, "POST", "/tokens", None, {"username": user, "password": password, "name": "cli"}
    )
    assert status == 201, out
    return str(out["token"])


def test_the_audit_trail_lists_a_members_submit_stop_and_delete_in_order(
    phalanx_home: Path, tmp_path: Path
) -> None:
    admin(
        phalanx_home,
        "user",
        "add",
        "root",
        "--admin",
        "--password-stdin",
        stdin="root-password\n",
        process=True,
    )
    admin(phalanx_home, "user", "add", "ada", "--password-stdin", stdin="ada-password\n")
    admin(phalanx_home, "user", "add", "vic", "--password-stdin", stdin="vic-password\n")
    admin(phalanx_home, "project", "add", "submit-tests")
    admin(phalanx_home, "member", "add", "submit-tests", "ada", "--role", "editor")
    admin(phalanx_home, "member", "add", "submit-tests", "vic", "--role", "viewer")
    server = start_server(phalanx_home)
    try:
        assert call(server, "GET", "/experiments", None)[0] == 401  # team mode: nobody anonymous
        ada, vic = token_of(server, "ada", "ada-password"), token_of(server, "vic", "vic-password")
        project = folder(tmp_path)
        refused = Client(server.url, vic)
        try:
            refused.submit(project / "exp.yml", pack(project), {"hold": "hold"}, 0)
            raise AssertionError("a viewer submitted")
        except Exception as exc:  # the client's error says why
            assert "viewer" in str(exc), exc
        exp_id = Client(server.url, ada).submit(project / "exp.yml", pack(project), {"hold": "hold"}, 0)["id"]
        deadline = time.monotonic() + 240
        while call(server, "GET", f"/experiments/{exp_id}", ada)[1]["status"] != "running":
            assert time.monotonic() < deadline, "the submitted experiment did not start within 240 s"
            time.sleep(0.3)
        assert call(server, "GET", f"/experiments/{exp_id}", vic)[1]["launched_by"] == "ada"
        assert call(server, "POST", f"/experiments/{exp_id}/stop", vic)[0] == 403
        assert call(server, "POST", f"/experiments/{exp_id}/stop", ada)[0] == 200
        while call(server, "GET", f"/experiments/{exp_id}", ada)[1]["status"] not in ("stopped", "failed"):
            assert time.monotonic() < deadline, "the experiment did not stop"
            time.sleep(0.3)
        supervisors_gone(server)
        assert call(server, "DELETE", f"/experiments/{exp_id}", ada)[0] == 403  # deleting is an admin's
        admin(phalanx_home, "member", "add", "submit-tests", "ada", "--role", "admin")
        assert call(server, "DELETE", f"/experiments/{exp_id}", ada)[0] == 204
    finally:
        stop_server(server.proc)
    trail = json.loads(admin(phalanx_home, "audit", "--json"))
    mine = [(e["actor"], e["action"]) for e in trail if e["target"] == exp_id]
    assert mine == [("ada", "experiment.submit"), ("ada", "experiment.stop"), ("ada", "experiment.delete")]
    assert [e["id"] for e in trail] == sorted(e["id"] for e in trail)
    assert any(e["action"] == "member.set" and e["target"] == "submit-tests/ada" for e in trail)


def test_a_server_admin_sets_the_team_up_from_a_laptop(phalanx_home: Path, tmp_path: Path) -> None:
    server = start_server(phalanx_home, token=SERVER_TOKEN)
    laptop, remote = tmp_path / "laptop", ("--server", server.url)
    try:
        first = ok(phalanx(laptop, "admin", "user", "add", "root", "--admin", "--password-stdin", *remote,
                           token=SERVER_TOKEN, stdin="root-password\n"))  # fmt: skip
        assert "the server is now in team mode" in first.stdout
        ok(phalanx(laptop, "admin", "user", "add", "ada", "--password-stdin", *remote,
                   token=SERVER_TOKEN, stdin="ada-password\n"))  # fmt: skip
        ok(phalanx(laptop, "admin", "project", "add", "vision", *remote, token=SERVER_TOKEN))
        ok(phalanx(laptop, "admin", "member", "add", "vision", "ada", "--role", "editor", *remote,
                   token=SERVER_TOKEN))  # fmt: skip
        ada = token_of(server, "ada", "ada-password")
        assert call(server, "GET", "/me", ada)[1]["projects"] == {"vision": "editor"}
        refused = phalanx(laptop, "admin", "user", "ls", *remote, token=ada)  # ada is no server admin
        assert refused.returncode == 2 and "admin" in refused.stderr and "Traceback" not in refused.stderr
        users = json.loads(
            ok(phalanx(laptop, "admin", "user", "ls", "--json", *remote, token=SERVER_TOKEN)).stdout
        )
        assert [(u["name"], u["admin"], u["disabled"]) for u in users] == [
            ("ada", False, False),
            ("root", True, False),
        ]
        there = ok(phalanx(laptop, "admin", "project", "ls", "--json", *remote, token=SERVER_TOKEN)).stdout
        ok(phalanx(laptop, "admin", "user", "disable", "ada", *remote, token=SERVER_TOKEN))
        assert call(server, "GET", "/me", ada)[0] == 401  # refused from the next request on
    finally:
        stop_server(server.proc)
    assert there == admin(phalanx_home, "project", "ls", "--json")  # byte for byte the server's machine's
    trail = json.loads(admin(phalanx_home, "audit", "--json"))
    assert [(e["action"], e["target"]) for e in trail] == [
        ("user.add", "root"),
        ("user.add", "ada"),
        ("project.add", "vision"),
        ("member.set", "vision/ada"),
        ("token.issue", "ada/cli"),
        ("user.disable", "ada"),
    ]
    assert {e["actor"] for e in trail[1:4] + trail[5:]} == {"root"}  # the server token acts as its admin
