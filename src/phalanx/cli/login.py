"""`phalanx login URL [--token T | --user NAME]` and `phalanx logout`: the server a team shares.

After a login, `phalanx run -f FILE` submits there and `ls`, `get`, `logs`, `metrics`, `params`,
`artifacts`, `diff`, `stop`, `tag`, `note` and `group get/stop` read and act there (``--local``
keeps this machine). The token is stored 0600 (``phalanx.logins``) and never printed.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from phalanx.cli.app import app

NOTHING_STORED = "nothing was stored"


@app.command("login")
def login(
    url: Annotated[str, typer.Argument(metavar="URL", help="The server, e.g. https://gpu-box:8000.")],
    token: Annotated[
        str | None, typer.Option("--token", metavar="TOKEN", help="The server's (or your) API token.")
    ] = None,
    token_file: Annotated[
        Path | None, typer.Option("--token-file", metavar="FILE", help="Read the token from FILE.")
    ] = None,
    user: Annotated[
        str | None,
        typer.Option(
            "--user",
            metavar="NAME",
            help="Log in with your user name; the password is asked (or read from stdin).",
        ),
    ] = None,
    expires_days: Annotated[
        int | None,
        typer.Option("--expires-days", metavar="DAYS", min=1, help="With --user: the token's lifetime."),
    ] = None,
) -> None:
    """Make the server at URL the default of every command (`--local` keeps this machine), with its
    token (--token, --token-file, PHALANX_TOKEN) or one the server hands out for --user NAME."""
    import socket

    from phalanx import logins
    from phalanx.apiclient import Client, check_url, read_token
    from phalanx.config import Settings
    from phalanx.errors import Unauthorized, UsageError

    url = check_url(url, "URL")
    ways = (("--token", token), ("--token-file", token_file), ("--user", user))
    given = [name for name, value in ways if value is not None]
    if len(given) > 1:
        raise UsageError(f"{' and '.join(given)}: give one way to log in")
    if token is not None and not token.strip():
        raise UsageError("--token: the token is empty")
    settings = Settings()
    secret = token.strip() if token is not None else read_token(token_file, settings.token)
    client = Client(url, secret, instead=NOTHING_STORED)
    if user is not None:
        password = _password(user, url)
        secret = client.new_token(user, password, f"phalanx login from {socket.gethostname()}", expires_days)
        client = Client(url, secret, instead=NOTHING_STORED)
    try:
        client.get("/experiments", limit=1)  # the URL and the token work, before anything is stored
    except Unauthorized as exc:  # the server said why: no token, a refused one, a disabled account
        raise Unauthorized(f"{exc}; {NOTHING_STORED}") from None
    file = logins.save(settings.home, logins.Login(url, secret))
    how = "with a token" if secret else "without a token"
    sys.stderr.write(
        f"phalanx: logged in to {url} {how} (kept in {file}); commands now use it, "
        "--local this machine, `phalanx logout` forgets it\n"
    )


def _password(user: str, url: str) -> str:
    """Asked without echo on a terminal; without one (a script, a pipe) the first line of stdin,
    read quietly as `phalanx secret set` reads a value (getpass would warn that it cannot hide it)."""
    from phalanx.errors import UsageError

    stdin = sys.stdin if sys.stdin is not None and not sys.stdin.closed else None
    if stdin is not None and stdin.isatty():
        import getpass

        password = getpass.getpass(f"password for {user} on {url}: ")
        if not password:
            raise UsageError(f"no password given; {NOTHING_STORED}")
        return password
    password = stdin.readline().rstrip("\r\n") if stdin is not None else ""
    if not password:
        raise UsageError(
            f"--user {user}: no terminal to ask the password on, and no password on stdin: pipe it in"
            f" (`phalanx login {url} --user {user} < password.txt`, its first line), or log in with"
            f" --token-file FILE; {NOTHING_STORED}"
        )
    return password


@app.command("logout")
def logout() -> None:
    """Forget the server `phalanx login` stored: every command works on this machine again."""
    from phalanx import logins
    from phalanx.config import Settings
    from phalanx.errors import UsageError

    settings = Settings()
    try:
        current = logins.load(settings.home)
    except UsageError:  # an unreadable file is removed all the same
        current = None
    if logins.clear(settings.home):
        where = f" from {current.url}" if current else ""
        sys.stderr.write(f"phalanx: logged out{where}; commands work on this machine\n")
    else:
        sys.stderr.write("phalanx: not logged in; commands work on this machine\n")
