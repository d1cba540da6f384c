"""What a command acting on a server says when the server refuses its token or cannot be reached
(docs/server-submit.md): the server's own reason, how to log in again when the token is the one
`phalanx login` stored, and for a server nobody answers at, exit status 69 (not 1, "it failed") with
one line naming the server and what works on this machine instead.

The server is the real app on a real loopback socket (``served``, conftest.py), and the CLI runs
in-process (tests/support/cli.py)."""

from __future__ import annotations

import socket
import warnings
from pathlib import Path

from phalanx import logins
from phalanx.errors import UNAVAILABLE_EXIT
from phalanx.store.accounts import Accounts
from tests.support.cli import phalanx_cli
from tests.unit.cli.conftest import TOKEN, Served


def test_a_wrong_token_at_login_is_told_it_was_refused_and_nothing_is_stored(
    served: Served, phalanx_home: Path
) -> None:
    server_url = served.url
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
    served: Served, phalanx_home: Path
) -> None:
    server_url = served.url
    logins.save(phalanx_home, logins.Login(server_url, "the-token-before-it-was-rotated"))
    done = phalanx_cli("ls")
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines()[-1] == (
        "error: this server refused the token: it is not this server's token (a wrong one, or the server's"
        " token was rotated since); ask the server's admin for its current token and log in again:"
        f" `phalanx login {server_url} --token TOKEN` (the refused token is the one `phalanx login` stored;"
        " `phalanx logout` forgets it, and commands then work on this machine)"
    )
    # no token at all (the login forgotten): asked for one, with the command that sends it
    assert phalanx_cli("logout").returncode == 0
    missing = phalanx_cli("ls", "--server", server_url)
    assert missing.returncode == 2 and missing.stderr.splitlines()[-1] == (
        "error: this server needs a token: send 'Authorization: Bearer <token>': log in with `phalanx login"
        f" {server_url} --token TOKEN` (or --user NAME), or set PHALANX_TOKEN, or pass --token-file"
    )


def test_a_disabled_account_is_told_so_at_login_and_after_it(served: Served, phalanx_home: Path) -> None:
    accounts = Accounts(served.store)
    accounts.add_user("root", "root-password-1", admin=True)  # a team server
    accounts.add_user("ada", "ada-password-1")
    assert phalanx_cli("login", served.url, "--user", "ada", input="ada-password-1\n").returncode == 0
    accounts.set_disabled("ada", True)
    said = (
        "error: the account 'ada' is disabled on this server, so its password, tokens and sessions are"
        " refused: ask a server admin to enable it again (`phalanx admin user enable ada` on the server's"
        " machine)"
    )
    after = phalanx_cli("ls")  # the token the login stored: logging in again would not help
    assert after.returncode == 2 and after.stderr.splitlines()[-1] == said, after.stderr
    again = phalanx_cli("login", served.url, "--user", "ada", input="ada-password-1\n")
    assert again.returncode == 2 and again.stderr.splitlines()[-1] == said, again.stderr


def test_a_password_piped_to_login_is_read_quietly_and_none_is_refused_saying_how(
    served: Served, phalanx_home: Path
) -> None:
    """No terminal (a script, a pipe): the password is stdin's first line, read without getpass's
    "Can not control echo on the terminal" warning; with nothing piped, exit 2 saying how."""
    Accounts(served.store).add_user("ada", "ada-password-1")
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        done = phalanx_cli("login", served.url, "--user", "ada", input="ada-password-1\n")
    assert done.returncode == 0, done.stderr
    assert [str(w.message) for w in warned] == [] and "echo" not in done.stderr.lower(), done.stderr
    assert done.stderr.startswith(f"phalanx: logged in to {served.url} with a token")
    assert phalanx_cli("logout").returncode == 0
    nothing = phalanx_cli("login", served.url, "--user", "ada", input="")
    assert nothing.returncode == 2 and nothing.stderr == (
        "error: --user ada: no terminal to ask the password on, and no password on stdin: pipe it in"
        f" (`phalanx login {served.url} --user ada < password.txt`, its first line), or log in with"
        " --token-file FILE; nothing was stored\n"
    )
    assert not logins.path(phalanx_home).exists()


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
