"""`phalanx secret set|ls|rm`: per-project credentials its experiments on this machine get as
environment variables. A value is read from stdin (or a hidden prompt), never from the command line
(which `ps` and shell histories show), and never printed back."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Annotated

import typer

from phalanx.cli.app import app, emit_json
from phalanx.cli.tracking import Format

if TYPE_CHECKING:
    from phalanx.config import Settings
    from phalanx.store.base import LocalStore

secret_app = typer.Typer(
    help="Per-project secrets, handed to the project's experiments as environment variables.",
    no_args_is_help=True,
)
app.add_typer(secret_app, name="secret")


def _open() -> tuple[Settings, LocalStore]:
    from phalanx.config import Settings
    from phalanx.store import open_store

    settings = Settings()
    return settings, open_store(settings)


@secret_app.command("set")
def set_secret(
    project: Annotated[str, typer.Argument(help="the project whose experiments get it")],
    name: Annotated[str, typer.Argument(help="the environment variable, e.g. AWS_SECRET_ACCESS_KEY")],
) -> None:
    """Set a secret; its value is read from stdin (`phalanx secret set vision KEY < key.txt`), or
    asked for without echo on a terminal."""
    from phalanx.store import secrets

    if sys.stdin.isatty():
        value = typer.prompt(f"value of {name}", hide_input=True)
    else:
        value = sys.stdin.read().removesuffix("\n")
    settings, store = _open()
    secrets.put(store, settings.home, project, name, value)
    typer.echo(f"project {project}: secret {name} set (its experiments on this machine get ${name})")


@secret_app.command("ls")
def list_secrets(
    project: Annotated[str | None, typer.Argument(help="only this project")] = None,
    output: Annotated[Format, typer.Option("-o", "--output", help="table or json")] = Format.TABLE,
) -> None:
    """List the secrets' names (never their values)."""
    from phalanx.cli.tracking import _table
    from phalanx.store import secrets

    _, store = _open()
    found = secrets.names(store, project)
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
) -> None:
    """Remove a secret (experiments already running keep their environment)."""
    from phalanx.errors import NotFound
    from phalanx.store import secrets

    _, store = _open()
    if not secrets.remove(store, project, name):
        raise NotFound(f"project {project} has no secret {name} (`phalanx secret ls {project}`)")
    typer.echo(f"project {project}: secret {name} removed")
