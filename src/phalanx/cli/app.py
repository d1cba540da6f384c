"""The Typer application every command module registers on.

Command modules import only typer and the standard library at module level: `phalanx --help` must
answer fast, and the supervisor must never import torch or other heavy modules.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer

from phalanx.cli.listing import Format

app = typer.Typer(
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


# `-o table|json`, what every command that can print a document takes
OutputOpt = Annotated[Format, typer.Option("-o", "--output", help="table or json")]


def emit_json(document: Any) -> None:
    """Print exactly one JSON document on stdout (what `-o json` promises scripts)."""
    sys.stdout.write(json.dumps(document, indent=2, default=str))
    sys.stdout.write("\n")
    sys.stdout.flush()


def human_size(n: int) -> str:
    """A byte count as every command shows it: "512 B", "1.5 KiB", ... up to GiB."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def fail(message: str, status: int = 2) -> typer.Exit:
    """Print a user-facing error to stderr and return the Exit to raise."""
    sys.stderr.write(f"error: {message}\n")
    return typer.Exit(status)


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
