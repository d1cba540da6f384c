"""`phalanx secret set|ls|rm`: per-project credentials its experiments get as environment variables,
on this machine or, after `phalanx login` (or with --server), on the server (``SecretBook``: one
door each; there the project's admins set and remove, its editors list names). A value is read from
stdin (or a hidden prompt), never from the command line (which `ps` and shell histories show), and
never printed back."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Annotated

import typer

from phalanx.cli.app import OutputOpt, app
from phalanx.cli.listing import emit_json
from phalanx.cli.target import DoorTyper, LocalOpt, ServerOpt
from phalanx.cli.tracking import Format

if TYPE_CHECKING:
    from phalanx.store.secrets import SecretBook

secret_app = DoorTyper(
    help="Per-project secrets, handed to the project's experiments as environment variables.",
    no_args_is_help=True,
)
app.add_typer(secret_app, name="secret")


def _door(server: str | None, local: bool) -> tuple[SecretBook, str]:
    """The secrets the command acts on (saying which door once a server is in play), and how its
    answer names where they are."""
    from phalanx.logins import choose

    client = choose(server, local)
    if client is not None:
        from phalanx.remote_store import RemoteSecrets

        return RemoteSecrets(client), f"on {client.url}"
    from phalanx.config import Settings
    from phalanx.store import open_store
    from phalanx.store.secrets import LocalSecrets

    settings = Settings()
    return LocalSecrets(open_store(settings), settings.home), "on this machine"


@secret_app.command("set")
def set_secret(
    project: Annotated[str, typer.Argument(help="the project whose experiments get it")],
    name: Annotated[str, typer.Argument(help="the environment variable, e.g. AWS_SECRET_ACCESS_KEY")],
    server: ServerOpt = None,
    local: LocalOpt = False,
) -> None:
    """Set a secret; its value is read from stdin (`phalanx secret set vision KEY < key.txt`), or
    asked for without echo on a terminal."""
    book, where = _door(server, local)
    if sys.stdin.isatty():
        value = typer.prompt(f"value of {name}", hide_input=True)
    else:
        value = sys.stdin.read().removesuffix("\n")
    book.put(project, name, value)
    typer.echo(f"project {project}: secret {name} set (its experiments {where} get ${name})")


@secret_app.command("ls")
def list_secrets(
    project: Annotated[str | None, typer.Argument(help="only this project (on a server: required)")] = None,
    output: OutputOpt = Format.TABLE,
    server: ServerOpt = None,
    local: LocalOpt = False,
) -> None:
    """List the secrets' names (never their values)."""
    from phalanx.cli.tracking import _table

    book, _ = _door(server, local)
    found = book.names(project)
    if output is Format.JSON:
        emit_json([{"project": p, "name": n, "updated_at": t} for p, n, t in found])
        return
    if not found:
        typer.echo("no secrets (`phalanx secret set PROJECT NAME < value.txt`)")
        return
    rows = [[p, n, time.strftime("%Y-%m-%d %H:%M", time.localtime(t))] for p, n, t in found]
    typer.echo(_table(["project", "name", "updated"], rows))


@secret_app.command("rm")
def remove_secret(
    project: Annotated[str, typer.Argument(help="the project")],
    name: Annotated[str, typer.Argument(help="the secret's name")],
    server: ServerOpt = None,
    local: LocalOpt = False,
) -> None:
    """Remove a secret (experiments already running keep their environment)."""
    book, _ = _door(server, local)
    book.remove(project, name)  # NotFound: no such secret, or a project a team server does not know
    typer.echo(f"project {project}: secret {name} removed")
