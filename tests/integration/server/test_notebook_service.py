"""A project's notebook server as a service on a real `phalanx server` (docs/services.md): started by a
project editor with the project's dataset as an input (a viewer may not, a non-member learns
nothing), its kernel runs a cell over the proxied WebSocket as the project's own account and reads
the input, a notebook saved through it stays in the project's folder after it stops, and a
WebSocket without credentials or from another site is refused."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
import websocket  # websocket-client: a plain synchronous client, as a script would use
from tests.integration.server.serverproc import running_server
from tests.integration.server.test_remote_commands import ok, phalanx
from tests.integration.server.test_services import NoRedirect, _call, service_processes
from tests.unit.server.teams_fixtures import make_team

from phalanx.config import Settings
from phalanx.store import catalog, open_store
from phalanx.store.accounts import Role

pytestmark = pytest.mark.slow

CELL = (
    "import os, pathlib\n"
    "folder = pathlib.Path(os.environ['PHALANX_INPUT_DIGITS'])\n"
    "print('UID', os.getuid(), 'ROWS', (folder / 'part-0.csv').read_text().strip())"
)


def _execute(url: str, token: str, code: str) -> str:
    """Run ``code`` in a new message on kernel channels ``url`` (ws://...); its stdout."""
    conn = websocket.create_connection(url, header=[f"Authorization: Bearer {token}"], timeout=120)
    try:
        msg_id = uuid.uuid4().hex
        conn.send(
            json.dumps(
                {
                    "header": {
                        "msg_id": msg_id,
                        "username": "test",
                        "session": uuid.uuid4().hex,
                        "msg_type": "execute_request",
                        "version": "5.3",
                    },
                    "parent_header": {},
                    "metadata": {},
                    "channel": "shell",
                    "content": {"code": code, "silent": False, "allow_stdin": False, "stop_on_error": True},
                }
            )
        )
        said = ""
        while True:
            reply: dict[str, Any] = json.loads(conn.recv())
            if reply.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            if reply["msg_type"] == "stream":
                said += reply["content"]["text"]
            if reply["msg_type"] == "error":
                raise AssertionError(reply["content"])
            if reply["msg_type"] == "status" and reply["content"]["execution_state"] == "idle":
                return said
    finally:
        conn.close()


def _refused(url: str, headers: list[str], origin: str | None = None) -> bool:
    """Whether the handshake is answered 403 (``origin``: the page's site; else the client's own)."""
    try:
        websocket.create_connection(url, header=headers, origin=origin, timeout=60).close()
    except websocket.WebSocketBadStatusException as refused:
        return refused.status_code == 403
    return False


def _signed_in(url: str, user: str, password: str) -> str:
    """The session cookie (``name=value``) that the sign-in form sets for ``user``."""
    form = urllib.parse.urlencode({"username": user, "password": password, "next": "/"}).encode()
    request = urllib.request.Request(f"{url}/login", data=form, method="POST")
    request.add_header("Origin", url)
    try:
        urllib.request.build_opener(NoRedirect).open(request, timeout=60)
    except urllib.error.HTTPError as answer:  # the 303 to where it goes next, with the cookie
        return str(answer.headers["set-cookie"]).split(";")[0]
    raise AssertionError("the sign-in form did not answer with a redirect")


def test_a_projects_notebook_runs_a_cell_over_the_proxy_with_its_input(tmp_path: Path) -> None:
    home = tmp_path / "server-home"
    store = open_store(Settings(home=home))
    team = make_team(store)
    tokens = team.tokens
    team.accounts.add_user("eve", "eve-password-0123")  # an editor of A who signs in with a browser
    team.accounts.set_member("A", "eve", Role.editor)
    rows = tmp_path / "digits"
    rows.mkdir()
    (rows / "part-0.csv").write_text("7,1\n")
    catalog.catalog_of(store, home).add_dataset("digits", str(rows), copy_to=None, project="A", shared=False)
    store.close()
    laptop = tmp_path / "laptop"
    planted = home / "notebooks" / "A" / "jupyterlab.py"  # an editor's file where it starts: never run
    planted.parent.mkdir(parents=True)
    planted.write_text(f"open({str(tmp_path / 'planted-ran')!r}, 'w').close()\n")
    with running_server(home, args=["--notebooks"]) as server:
        api = f"{server.url}/api/v1"
        ask = {"kind": "notebook", "project": "A", "inputs": [{"name": "digits", "dataset": "digits@latest"}]}
        assert _call(f"{api}/services", tokens["viewer_a"], "POST", ask)[0] == 403
        assert _call(f"{api}/services", tokens["admin_b"], "POST", ask)[0] == 404
        started = json.loads(
            ok(
                phalanx(
                    laptop,
                    "notebook",
                    "start",
                    "--project",
                    "A",
                    "--input",
                    "digits=digits@latest",
                    "-o",
                    "json",
                    "--server",
                    server.url,
                    token=tokens["editor_a"],
                )
            ).stdout
        )
        assert started["started"] and started["url"] == f"{server.url}/services/{started['id']}/"
        base = f"{server.url}{started['path']}"
        assert not (tmp_path / "planted-ran").exists()
        listen = next(Path(p) for p in [(home / "services" / started["id"] / "listen").read_text()])
        assert listen.stat().st_uid == os.getuid()  # its socket cannot be swapped from its box
        status, kernel = _call(f"{base}api/kernels", tokens["editor_a"], "POST", {})
        assert status == 201, kernel
        assert _call(f"{base}api/kernels", tokens["viewer_a"])[0] == 403  # code runs there: editors'
        assert _call(f"{base}api/kernels", tokens["none"])[0] == 404

        channels = f"{base.replace('http://', 'ws://')}api/kernels/{kernel['id']}/channels"
        said = _execute(channels, tokens["editor_a"], CELL)
        uid, rows_seen = said.split("UID ")[1].split(" ROWS ")
        assert rows_seen.strip() == "7,1"
        assert int(uid) != 0  # the project's own account, not the server's root
        # refused before a kernel message: no credential, a viewer, a page of another site
        assert _refused(channels, [])
        assert _refused(channels, [f"Authorization: Bearer {tokens['viewer_a']}"])
        # eve's browser session: a page of this server may open it, a page of another site may not
        # (cross-site WebSocket hijacking), and a forged session opens nothing
        cookie = f"Cookie: {_signed_in(server.url, 'eve', 'eve-password-0123')}"
        assert not _refused(channels, [cookie], origin=server.url)
        assert _refused(channels, [cookie], origin="https://evil.example")
        assert _refused(channels, ["Cookie: phalanx_session=forged"], origin=server.url)

        # a notebook saved through it outlives it, in the project's folder on the server
        saved = {
            "type": "notebook",
            "content": {"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5},
        }
        assert _call(f"{base}api/contents/kept.ipynb", tokens["editor_a"], "PUT", saved)[0] in (200, 201)
        ok(
            phalanx(
                laptop, "notebook", "stop", started["id"], "--server", server.url, token=tokens["editor_a"]
            )
        )
        assert not service_processes(home, started["id"])
        assert (home / "notebooks" / "A" / "kept.ipynb").is_file()
        assert _call(f"{base}api/status", tokens["editor_a"])[0] == 404
