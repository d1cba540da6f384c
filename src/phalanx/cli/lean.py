"""The lean door for the commands users type most: `phalanx ls` without typer.

Typer (0.29) builds a pydantic TypeAdapter for every option it parses: a one-command Typer app costs
0.19 CPU-s before it does anything, the whole of issue 30's 0.2 CPU-s budget for `phalanx ls`. So
``main`` first offers the arguments to ``dispatch``: when they are a plain `phalanx ls` (options it
knows, values it accepts) it runs the command itself with argparse from the standard library;
anything else — `--help`, a typo, a value out of range, an option it does not know — returns None and
the Typer app answers exactly as before (its usage message, its exit status). The Typer command stays
the definition: tests/unit/cli/test_lean_dispatch.py checks that the options here are its options.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import NoReturn


class _Refused(Exception):
    """argparse met something it does not accept: the Typer app answers instead."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # never print argparse's usage: Typer's is the real one
        raise _Refused(message)


def _ls_parser() -> _Parser:
    p = _Parser(prog="phalanx ls", add_help=False, allow_abbrev=False)
    p.add_argument("--status")
    p.add_argument("--project")
    p.add_argument("--search")
    p.add_argument("--limit", "-n", type=int)
    p.add_argument("--output", "-o", choices=("table", "json"))
    p.add_argument("--group")
    p.add_argument("--tag")
    p.add_argument("--where", action="append")  # the full store reads the summary for these
    p.add_argument("--column", action="append")
    return p


def _ls(ns: argparse.Namespace) -> bool:
    from phalanx.cli.listing import Format, ls_experiments

    if ns.limit is not None and ns.limit < 1:
        return False  # Typer says how (`--limit`: 0 is not in the range x>=1)
    ls_experiments(
        status=ns.status,
        project=ns.project,
        search=ns.search,
        limit=50 if ns.limit is None else ns.limit,
        output=Format(ns.output or "table"),
        group=ns.group,
        tag=ns.tag,
        where=ns.where,
        columns=ns.column,
    )
    return True


# command -> (its parser, its runner: False when the Typer app must answer after all)
LEAN_COMMANDS: dict[str, tuple[Callable[[], _Parser], Callable[[argparse.Namespace], bool]]] = {
    "ls": (_ls_parser, _ls),
}


def parse(args: Sequence[str]) -> tuple[str, argparse.Namespace] | None:
    """The lean command and its parsed options, or None when the Typer app must answer."""
    if not args or args[0] not in LEAN_COMMANDS:
        return None
    rest = list(args[1:])
    if any(a in ("--help", "-h", "--") for a in rest):
        return None
    make_parser, _ = LEAN_COMMANDS[args[0]]
    try:
        ns, extra = make_parser().parse_known_args(rest)
    except _Refused:
        return None
    if extra:
        return None
    return args[0], ns


def dispatch(args: Sequence[str]) -> bool:
    """Run `phalanx ARGS` here if it is a lean command; whether it ran. Phalanx errors propagate
    (``main`` maps them to messages and exit statuses as for every command)."""
    parsed = parse(args)
    if parsed is None:
        return False
    command, ns = parsed
    _, run = LEAN_COMMANDS[command]
    return run(ns)
