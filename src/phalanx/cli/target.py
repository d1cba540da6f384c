"""Which store a command works on: this machine's, or a Phalanx server's API.

`--server URL` names a server; `phalanx login URL` makes one the default; `--local` keeps this
machine whatever the login says. Once a server is in play (a login stored, or either option given)
every command says on stderr, in one line, which it uses ("phalanx: on server URL" / "phalanx: on
this machine"), so nobody reads a laptop's store believing it is the team's. Without a login and
without the options, nothing is printed and everything is local, as before logins existed.

A command meaningful only on this machine (`phalanx gc`, `phalanx sync`) takes `--server` only to
refuse it (``this_machine_only``: exit status 2, saying so), never to act on this machine instead.
"""

from __future__ import annotations

import getpass
from typing import TYPE_CHECKING, Annotated

import typer

from phalanx.errors import UsageError

if TYPE_CHECKING:
    from phalanx.config import Settings

ServerOpt = Annotated[
    str | None,
    typer.Option(
        "--server", metavar="URL", help="The Phalanx server at URL (default: the one `phalanx login` chose)."
    ),
]
LocalOpt = Annotated[bool, typer.Option("--local", help="This machine's store, even after `phalanx login`.")]

ThisMachineOnlyOpt = Annotated[
    str | None,
    typer.Option("--server", metavar="URL", help="Refused: this command acts on this machine only."),
]


def this_machine_only(command: str, server: str | None, instead: str) -> None:
    """Refuse ``--server`` for a command that acts on this machine only (a UsageError: exit status
    2, nothing done); ``instead``: what to do for the server. After `phalanx login`, say the door
    (this machine), as every command does once a server is in play."""
    from phalanx import logins  # why: the command modules import this one for its options (start-up)
    from phalanx.config import Settings  # why: as above

    if server is not None:
        raise UsageError(
            f"`phalanx {command}` acts on this machine only; it does not take --server {server}: {instead}"
        )
    if logins.load(Settings().home) is not None:
        logins.say_door(None)


def submit_server(server: str | None, local: bool, settings: Settings) -> str | None:
    """The server a run or a group is submitted to: --server, else the one `phalanx login` stored;
    None with --local (said, after a login)."""
    from phalanx import logins  # why: the command modules import this one for its options (start-up)

    if server is None and not local:  # after `phalanx login URL`, the server is the default
        stored = logins.load(settings.home)
        return stored.url if stored is not None else None
    if local:
        if server is not None:
            raise UsageError("--server and --local: give one (--local runs it on this machine)")
        logins.say_door(None)
    return server


def shell_actor() -> str:
    """Who a change made on this machine's store is audited as: ``cli:`` and the shell's login."""
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):
        return "cli"
