"""Which store a command works on: this machine's, or a Phalanx server's API.

`--server URL` names a server; `phalanx login URL` makes one the default; `--local` keeps this
machine whatever the login says. Once a server is in play (a login stored, or either option given)
every command says on stderr, in one line, which it uses ("phalanx: on server URL" / "phalanx: on
this machine"), so nobody reads a laptop's store believing it is the team's. Without a login and
without the options, nothing is printed and everything is local, as before logins existed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    pass

ServerOpt = Annotated[
    str | None,
    typer.Option(
        "--server", metavar="URL", help="The Phalanx server at URL (default: the one `phalanx login` chose)."
    ),
]
LocalOpt = Annotated[bool, typer.Option("--local", help="This machine's store, even after `phalanx login`.")]
