"""Every command has decided where it acts (issue 38, one door): on both doors (this machine's store,
or after `phalanx login` the server's, ``--server URL``/``--local``), on a server only, on this
machine only (``--server`` refused with exit status 2, and "phalanx: on this machine" said after a
login, never the laptop's store acted on unannounced), or on no store at all. A command added
without that decision fails here, and so does one docs/server-submit.md's table does not place as
the code does."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer.main

from phalanx.cli.app import app
from phalanx.cli.main import _register
from phalanx.cli.target import NO_DOOR, SERVER_ONLY
from tests.support.cli import phalanx_cli

DOCS = Path(__file__).resolve().parents[3] / "docs" / "server-submit.md"

# Commands that read or write no store: where they act is not a door's question.
NO_STORE = {
    "check": "validates a file on this machine",
    "login": "stores the server to use",
    "logout": "forgets it",
    "server": "is the server",
    "version": "prints Phalanx's version",
}
BOTH, SERVER, HERE, NONE = "both", "server", "this machine", "none"


def _commands() -> Iterator[tuple[str, Any]]:
    _register(None)
    stack: list[tuple[list[str], Any]] = [([], typer.main.get_command(app))]
    while stack:
        path, command = stack.pop()
        if hasattr(command, "commands"):  # a group: its subcommands
            stack.extend(([*path, name], sub) for name, sub in command.commands.items())
        elif not command.hidden:
            yield " ".join(path), command


def _door(name: str, command: Any) -> str:
    options = {p.name: p for p in command.params}
    server = options.get("server")
    if server is None:
        assert name in NO_STORE, (
            f"`phalanx {name}` takes no --server: decide where it acts. Both doors: ServerOpt and "
            "LocalOpt (cli/target.py) with `logins.choose`; this machine only: ThisMachineOnlyOpt with "
            "`this_machine_only`; or add it to NO_STORE with why it reads no store"
        )
        return NONE
    if (server.help or "").startswith("Refused"):
        return HERE
    return BOTH if "local" in options else SERVER


DOORS = {name: _door(name, command) for name, command in _commands()}


def test_every_command_has_a_door_and_the_docs_place_each_as_the_code_does() -> None:
    rows = re.findall(r"^\| `phalanx ([a-z -]+)` \| ([a-z ]+) \|", DOCS.read_text(), re.M)
    documented = {name.strip(): where.strip() for name, where in rows}
    assert documented == DOORS, {
        name: (documented.get(name), DOORS.get(name))
        for name in set(documented) | set(DOORS)
        if documented.get(name) != DOORS.get(name)
    }
    assert {SERVER, HERE, BOTH, NONE} <= set(DOORS.values())


def test_hints_are_given_a_door_by_what_each_command_takes() -> None:
    """cli/target.py's lists (a hint naming one of these keeps its words) are the code's doors."""
    assert {name for name, door in DOORS.items() if door in (NONE, HERE)} == NO_DOOR
    assert {name for name, door in DOORS.items() if door == SERVER} == SERVER_ONLY


def _placeholders(command: Any) -> list[str]:
    """The command's required arguments and options, each given a word."""
    words: list[str] = []
    for p in command.params:
        if p.required:
            words += ["x"] if p.param_type_name == "argument" else [p.opts[0], "x"]
    return words


HERE_ONLY = sorted(name for name, door in DOORS.items() if door == HERE)


@pytest.mark.parametrize("name", HERE_ONLY)
def test_a_command_of_this_machine_refuses_a_server_and_does_nothing(name: str, tmp_path: Path) -> None:
    command = dict(_commands())[name]
    done = phalanx_cli(
        *name.split(),
        *_placeholders(command),
        "--server",
        "http://127.0.0.1:9",
        env={"PHALANX_HOME": str(tmp_path)},
    )
    assert done.returncode == 2, done
    assert f"`phalanx {name}` acts on this machine only" in done.stderr, done.stderr
    assert not (tmp_path / "phalanx.db").exists()  # refused before the store was opened
