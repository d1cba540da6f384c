"""The Typer application every command module registers on.

Command modules import only typer and the standard library at module level: `phalanx --help` must
answer fast, and the supervisor must never import torch or other heavy modules.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from enum import StrEnum
from typing import Annotated, Any, TypeVar

import typer

from phalanx.cli.listing import Format
from phalanx.cli.target import DoorTyper
from phalanx.suggest import did_you_mean

app = DoorTyper(
    name="phalanx",
    help="Run and track distributed deep-learning experiments.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


# `--extra-params`, shared by `run` and `rerun` (both launch from a file with `--param` values)
ExtraParamsOpt = Annotated[
    bool,
    typer.Option(
        "--extra-params",
        help="Record --param names the file neither declares nor uses (refused without this flag).",
    ),
]


Choice = TypeVar("Choice", bound=StrEnum)


def choice(kind: type[Choice]) -> Callable[[str | Choice], Choice]:
    """The parser of an option whose values are ``kind``'s (see ``choice_option``)."""
    values = [c.value for c in kind]

    def parse(value: str | Choice) -> Choice:
        if isinstance(value, kind):
            return value
        try:
            return kind(value)
        except ValueError:
            listed = ", ".join(repr(v) for v in values)
            hint = did_you_mean(str(value), values)
            raise typer.BadParameter(f"{value!r} is not one of {listed}{hint}") from None

    return parse


def choice_option(kind: type[StrEnum], *declarations: str, help: str) -> Any:
    """A typer option taking one of ``kind``'s values. Typed as the Enum itself, typer had pydantic
    check it, whose message began "Value error, "; this one says only what was given and the choices
    (and the nearest one)."""
    metavar = "|".join(c.value for c in kind)
    return typer.Option(*declarations, parser=choice(kind), metavar=metavar, help=help)


# `-o table|json`, what every command that can print a document takes
OutputOpt = Annotated[Format, choice_option(Format, "-o", "--output", help="table or json")]


def fail(message: str, status: int = 2) -> typer.Exit:
    """Print a user-facing error to stderr and return the Exit to raise."""
    sys.stderr.write(f"error: {message}\n")
    return typer.Exit(status)


YesOpt = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")]


def on_terminal() -> bool:
    """Whether someone can answer a question (stdin is a terminal)."""
    return sys.stdin.isatty()


def confirm(question: str, doing: str, declined: str = "nothing removed") -> None:
    """What a destructive command does without --yes: asks ``question`` on a terminal (no:
    ``declined`` on stderr, exit 1); without one (a script, stdin from /dev/null) refuses, exit 2,
    with "``doing`` needs confirmation: pass --yes". Every rm/delete that asks goes through here."""
    from phalanx.errors import UsageError

    if not on_terminal():
        raise UsageError(f"{doing} needs confirmation: pass --yes")
    if not typer.confirm(question):
        typer.echo(declined, err=True)
        raise typer.Exit(1)


@app.command("version")
def version() -> None:
    """Print Phalanx's version."""
    from phalanx._version import __version__

    typer.echo(__version__)


def _print_version(value: bool) -> None:
    if value:
        from phalanx._version import __version__

        typer.echo(f"phalanx {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            "-V",
            is_eager=True,
            callback=_print_version,
            help="Print Phalanx's version and exit.",
        ),
    ] = False,
) -> None:
    """Run and track distributed deep-learning experiments."""
