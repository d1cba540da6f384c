"""A project's notebook server as a service on a real `phalanx server` (docs/services.md): started by a
project editor with the project's dataset as an input (a viewer may not, a non-member learns
nothing), its kernel runs a cell over the proxied WebSocket as the project's own account and reads
the input, a notebook saved through it stays in the project's folder after it stops, and a
WebSocket without credentials or from another site is refused."""

from __future__ import annotations

import json
import os
import time
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
from phalanx.server.service_origin import RECHECK_SECONDS
from phalanx.server.service_spawn import listened_in
from phalanx.store import catalog, open_store
from phalanx.store.accounts import Accounts, Role

pytestmark = pytest.mark.slow

CELL = (
    "import os, pathlib\n"
    "folder = pathlib.Path(os.environ['PHALANX_INPUT_DIGITS'])\n"
    "print('UID', os.getuid(), 'ROWS', (folder / 'part-0.csv').read_text().strip())"
)


def _execute(url: str, code: str, **connect: Any) -> str:
    """Run ``code`` in a new message on kernel channels ``url`` (ws://...), connected with
    ``connect`` (websocket-client's header, host, origin, cookie); its stdout."""
    conn = websocket.create_connection(url, timeout=120, **connect)
    try:
        return _run_on(conn, code)
    finally:
        conn.close()


def _run_on(conn: websocket.WebSocket, code: str) -> str:
    """Run ``code`` over the open kernel channels ``conn``; its stdout."""
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
        raw = conn.recv()
        if not raw:  # a close frame: the server ended it
            raise websocket.WebSocketConnectionClosedException("the server closed the socket")
        reply: dict[str, Any] = json.loads(raw)
        if reply.get("parent_header", {}).get("msg_id") != msg_id:
            continue
        if reply["msg_type"] == "stream":
            said += reply["content"]["text"]
        if reply["msg_type"] == "error":
            raise AssertionError(reply["content"])
        if reply["msg_type"] == "status" and reply["content"]["execution_state"] == "idle":
            return said


def _refused(url: str, headers: list[str], origin: str | None = None, **connect: Any) -> bool:
    """Whether the handshake is answered 403 (``origin``: the page's site; else the client's own;
    ``connect``: websocket-client's host or cookie)."""
    try:
        websocket.create_connection(url, header=headers, origin=origin, timeout=60, **connect).close()
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
        [listen] = listened_in(home / "services" / started["id"])
        assert listen.stat().st_uid == os.getuid()  # its socket cannot be swapped from its box
        status, kernel = _call(f"{base}api/kernels", tokens["editor_a"], "POST", {})
        assert status == 201, kernel
        assert _call(f"{base}api/kernels", tokens["viewer_a"])[0] == 403  # code runs there: editors'
        assert _call(f"{base}api/kernels", tokens["none"])[0] == 404

        channels = f"{base.replace('http://', 'ws://')}api/kernels/{kernel['id']}/channels"
        said = _execute(channels, CELL, header=[f"Authorization: Bearer {tokens['editor_a']}"])
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


def _eve_in_a(home: Path, role: Role | None) -> None:
    """eve made ``role`` of project A on the running server's store (None: no member)."""
    store = open_store(Settings(home=home))
    try:
        if role is None:
            Accounts(store).remove_member("A", "eve")
        else:
            Accounts(store).set_member("A", "eve", role)
    finally:
        store.close()


def _browse(url: str, host: str, cookie: str, method: str = "GET") -> tuple[int, Any]:
    """(status, headers) of a browser's request to ``url`` sent as to ``host`` (a service's name,
    which resolves nowhere here: the server listens on loopback), redirects not followed."""
    request = urllib.request.Request(url, method=method, data=b"{}" if method == "POST" else None)
    request.add_header("Host", host)
    if cookie:
        request.add_header("Cookie", cookie)
    try:
        with urllib.request.build_opener(NoRedirect).open(request, timeout=60) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as answer:
        return answer.code, answer.headers


def test_a_notebook_at_its_own_origin_runs_a_cell_for_its_editor_with_a_pass(tmp_path: Path) -> None:
    """With --service-origin a notebook is served at http://ID.svc.localhost:PORT: the server hands a
    signed-in editor a one-use ticket there, which buys a pass of that host alone; the kernel's
    WebSocket runs a cell with the pass from a page of that origin, and is refused from the server's
    own pages or with the server's session (what the notebook's page holds of the server: nothing)."""
    home = tmp_path / "server-home"
    store = open_store(Settings(home=home))
    team = make_team(store)
    team.accounts.add_user("eve", "eve-password-0123")
    team.accounts.set_member("A", "eve", Role.editor)
    store.close()
    origin = ["--notebooks", "--service-origin", "http://{id}.svc.localhost"]
    with running_server(home, args=origin) as server:
        started = _call(
            f"{server.url}/api/v1/services",
            team.tokens["editor_a"],
            "POST",
            {"kind": "notebook", "project": "A"},
        )
        assert started[0] == 201, started
        service, port = started[1]["id"], server.url.rsplit(":", 1)[1]
        host = f"{service}.svc.localhost:{port}"
        session = _signed_in(server.url, "eve", "eve-password-0123")
        status, sent = _browse(
            f"{server.url}/services/{service}/api/status", server.url.split("//")[1], session
        )
        ticket = urllib.parse.urlsplit(sent["location"])
        assert (status, ticket.netloc, ticket.path) == (303, host, "/_phalanx/enter")
        local = f"http://127.0.0.1:{port}"
        assert _browse(f"{local}/services/{service}/api/status", host, session)[0] == 303  # no pass: back
        status, entered = _browse(f"{local}{ticket.path}?{ticket.query}", host, "")
        assert (status, entered["location"]) == (303, f"/services/{service}/api/status")
        held = str(entered["set-cookie"]).split(";")[0]
        assert held.startswith("phalanx_service=")
        status, kernel = _browse(f"{local}/services/{service}/api/kernels", host, held, "POST")
        assert status == 201, kernel

        channels = f"ws://127.0.0.1:{port}/services/{service}/api/kernels/{kernel['id']}/channels"
        said = _execute(
            channels, "import os; print('UID', os.getuid())", host=host, origin=f"http://{host}", cookie=held
        )
        assert int(said.split("UID ")[1]) != 0  # in the project's box, as on the server's origin
        # an open socket follows its holder: once eve is no member, her next cell closes it
        conn = websocket.create_connection(
            channels, timeout=120, host=host, origin=f"http://{host}", cookie=held
        )
        assert "42" in _run_on(conn, "print(6 * 7)")
        _eve_in_a(home, None)
        time.sleep(RECHECK_SECONDS + 0.5)  # past the socket's next check: it is asked on this message
        with pytest.raises(websocket.WebSocketConnectionClosedException):
            _run_on(conn, "print('still here')")
        conn.close()
        _eve_in_a(home, Role.editor)  # again: what follows is refused for its own reason
        assert _refused(channels, [], origin=server.url, host=host, cookie=held)  # a page of the server's
        assert _refused(channels, [], origin=f"http://{host}", host=host)  # no pass
        at_server = (
            f"{server.url.replace('http://', 'ws://')}/services/{service}/api/kernels/{kernel['id']}/channels"
        )
        assert _refused(at_server, [f"Cookie: {session}"], origin=server.url)  # not served to a browser there
