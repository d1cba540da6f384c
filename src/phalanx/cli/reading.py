"""What the read commands share (cli/tracking.py, cli/details.py, and the group, annotate and
delete commands): the store they read (this machine's or a server's) and how records are shown.

Only typer and the standard library at module level (`phalanx --help` stays fast).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from phalanx.cli.listing import open_for_reading

if TYPE_CHECKING:
    from phalanx.store.door import Door

IdArg = Annotated[str, typer.Argument(metavar="ID", help="Experiment id or a unique prefix of one.")]


def open_target(server: str | None = None, local: bool = False) -> Door:
    """The store a read or control command works on: a server's (``RemoteStore``, after `phalanx
    login` or with --server) or this machine's (after one ingest pass, ``open_for_reading``)."""
    from phalanx.logins import choose

    client = choose(server, local)
    if client is None:
        return open_for_reading()[0]
    from phalanx.remote_store import RemoteStore

    return RemoteStore(client)
