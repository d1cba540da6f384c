"""What a command acting on a server says when the server refuses its token or cannot be reached
(docs/server-submit.md): the server's own reason, how to log in again when the token is the one
`phalanx login` stored, and for a server nobody answers at, exit status 69 (not 1, "it failed") with
one line naming the server and what works on this machine instead.

The server is the real app on a real loopback socket, served by uvicorn in a thread of this process,
and the CLI runs in-process (tests/support/cli.py)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn

from phalanx import logins
from phalanx.config import Settings
from phalanx.errors import UNAVAILABLE_EXIT
from phalanx.server.app import create_app
from phalanx.server.settings import ServerSettings
from phalanx.store import open_store
from tests.support.cli import phalanx_cli

TOKEN = "the-servers-token-0123456789"


@pytest.fixture
def server_url(tmp_path: Path, phalanx_home: Path) -> Iterator[str]:
    """A token-guarded server with its own home (not the CLI's), on a socket bound here."""
    settings = ServerSettings(
        store=Settings(home=tmp_path / "server-home"),
        token=TOKEN,
        allowed_hosts=["127.0.0.1", "localhost"],
        launch_workers=0,
    )
    store = open_store(settings.store)
    listener = socket.create_server(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(create_app(settings, store), log_level="warning", lifespan="on"))
    serving = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    serving.start()
    try:
        while not server.started:  # start-up is a few ms of work; the thread says when it is done
            assert serving.is_alive(), "the server did not start"
            threading.Event().wait(0.01)
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        server.should_exit = True
        serving.join(timeout=30)
        listener.close()
        store.close()


def test_a_wrong_token_at_login_is_told_it_was_refused_and_nothing_is_stored(
    server_url: str, phalanx_home: Path
) -> None:
    done = phalanx_cli("login", server_url, "--token", "not-the-token")
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        "error: this server refused the token: it is not this server's token (a wrong one, or the server's"
        " token was rotated since); ask the server's admin for its current token and log in again:"
        f" `phalanx login {server_url} --token TOKEN`; nothing was stored\n"
    )
    assert not logins.path(phalanx_home).exists()
    assert phalanx_cli("login", server_url, "--token", TOKEN).returncode == 0


def test_a_stored_token_the_server_no_longer_takes_says_how_to_log_in_again(
    server_url: str, phalanx_home: Path
) -> None:
    logins.save(phalanx_home, logins.Login(server_url, "the-token-before-it-was-rotated"))
    done = phalanx_cli("ls")
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines()[-1] == (
        "error: this server refused the token: it is not this server's token (a wrong one, or the server's"
        " token was rotated since); ask the server's admin for its current token and log in again:"
        f" `phalanx login {server_url} --token TOKEN` (the refused token is the one `phalanx login` stored;"
        " `phalanx logout` forgets it, and commands then work on this machine)"
    )
    # no token at all (another server than the login's): asked for one, with the command that sends it
    other = phalanx_cli("ls", "--server", server_url.replace("127.0.0.1", "localhost"))
    assert other.returncode == 2 and "this server needs a token: send 'Authorization: Bearer <token>'" in (
        other.stderr
    )
    assert f"log in with `phalanx login {server_url.replace('127.0.0.1', 'localhost')} --token TOKEN`" in (
        other.stderr
    )


def test_a_server_nobody_answers_at_is_its_own_exit_status_with_the_way_back_to_this_machine(
    phalanx_home: Path,
) -> None:
    with socket.socket() as bound:  # bound, never listening: connections to it are refused
        bound.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{bound.getsockname()[1]}"
        named = phalanx_cli("get", "3f2a", "--server", url)  # no login: --server names it
        logins.save(phalanx_home, logins.Login(url, TOKEN))
        logged_in = phalanx_cli("ls")
        logging_in = phalanx_cli("login", url, "--token", TOKEN)
    assert UNAVAILABLE_EXIT == 69
    assert logged_in.returncode == named.returncode == logging_in.returncode == UNAVAILABLE_EXIT
    assert logged_in.stderr == (
        f"phalanx: on server {url}\nerror: cannot reach the server at {url} (Connection refused);"
        " `--local` works on this machine, or `phalanx logout` to forget the server\n"
    )
    assert named.stderr.splitlines()[-1] == (
        f"error: cannot reach the server at {url} (Connection refused); `--local` works on this machine"
    )
    assert logging_in.stderr == (
        f"error: cannot reach the server at {url} (Connection refused); nothing was stored\n"
    )
    assert logins.load(phalanx_home) == logins.Login(url, TOKEN)  # the failed login changed nothing
