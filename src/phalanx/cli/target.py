"""Which store a command works on: this machine's, or a Phalanx server's API.

`--server URL` names a server; `phalanx login URL` makes one the default; `--local` keeps this
machine whatever the login says. Once a server is in play (a login stored, or either option given)
every command says on stderr, in one line, which it uses ("phalanx: on server URL" / "phalanx: on
this machine"), so nobody reads a laptop's store believing it is the team's. Without a login and
without the options, nothing is printed and everything is local, as before logins existed.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from phalanx.apiclient import Client
    from phalanx.config import Settings

ServerOpt = Annotated[
    str | None,
    typer.Option(
        "--server", metavar="URL", help="The Phalanx server at URL (default: the one `phalanx login` chose)."
    ),
]
LocalOpt = Annotated[bool, typer.Option("--local", help="This machine's store, even after `phalanx login`.")]


def choose(
    server: str | None,
    local: bool,
    token_file: Path | None = None,
    settings: Settings | None = None,
    *,
    say: bool = True,
) -> Client | None:
    """The server's client, or None for this machine; says which on stderr once a server is in play.

    The token: ``token_file``, else PHALANX_TOKEN, else the stored login's (for its own URL only:
    a token is never sent to a server it was not given for)."""
    from phalanx import logins
    from phalanx.apiclient import Client, check_url, read_token
    from phalanx.config import Settings
    from phalanx.errors import UsageError

    if server is not None and local:
        raise UsageError("--server and --local: give one (--local is this machine's store)")
    settings = settings or Settings()
    login = logins.load(settings.home)
    if local or (server is None and login is None):
        if say and (local or login is not None):
            sys.stderr.write("phalanx: on this machine\n")
        return None
    url = check_url(server) if server is not None else check_url(login.url if login else "")
    stored = login.token if login is not None and check_url(login.url) == url else None
    client = Client(url, read_token(token_file, settings.token) or stored)
    if say:
        sys.stderr.write(f"phalanx: on server {client.url}\n")
    return client
