"""A delete (of experiments, of a group) or an rm on a server (--server URL) or with --local names
the commands of its hints on the same door: a bare `phalanx ls` after `phalanx delete ID --server
URL` read this machine's store (or, after --local, the login's server), not the one the user was
deleting on. So does every other command that takes a door (cli/target.py's ``DoorTyper``): before,
`phalanx get zz --server URL` said `phalanx ls` lists them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from phalanx.cli.target import on_door
from tests.support.cli import phalanx_cli
from tests.unit.cli.conftest import TOKEN, Served

# each refused for something missing there, with a hint naming a command
REMOVALS = [
    ("delete", "0123456789ab", "--yes"),
    ("group", "delete", "0123456789ab", "--yes"),
    ("data", "rm", "digits", "--yes"),
    ("data", "rm", "digits@2", "--yes"),
    ("datastore", "rm", "lake"),
    ("models", "rm", "digits", "--yes"),
    ("models", "rm", "digits@prod"),
    ("secret", "rm", "vision", "KEY"),
    ("quota", "rm", "vision"),
    ("cluster", "rm", "big"),
]

# commands refused for something missing there that took a door but had no hints_on_door of their own
LOOKUPS = [
    ("get", "zz"),
    ("metrics", "zz"),
    ("logs", "zz"),
    ("tag", "zz", "x"),
    ("diff", "zz", "yy"),
    ("rerun", "zz"),
    ("models", "get", "nope"),
    ("group", "get", "nope"),
    ("serve", "nope"),
    ("models", "alias", "nope@prod"),  # refused before any lookup: a VERSION is missing
    ("diff", "zz@x", "yy"),  # an attempt written wrong
]


def _hints(stderr: str) -> list[str]:
    (error,) = [line for line in stderr.splitlines() if line.lstrip().startswith("error:")]
    return re.findall(r"`(phalanx [^`]*)`", error)


@pytest.mark.parametrize("args", [*REMOVALS, ("alert", "rm", "h1a2b3c4d5e6"), *LOOKUPS], ids=" ".join)
def test_a_refusal_on_a_server_hints_commands_on_that_server(
    args: tuple[str, ...], served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PHALANX_TOKEN", TOKEN)  # no login: --server alone names the server
    done = phalanx_cli(*args, "--server", served.url)
    assert done.returncode == 2, done.stderr
    hints = _hints(done.stderr)
    assert hints and all(h.endswith(f" --server {served.url}") for h in hints), done.stderr


@pytest.mark.parametrize("args", [*REMOVALS, *LOOKUPS], ids=" ".join)
def test_a_refusal_with_local_hints_commands_on_this_machine(
    args: tuple[str, ...], phalanx_home: Path
) -> None:
    done = phalanx_cli(*args, "--local")
    assert done.returncode == 2, done.stderr
    hints = _hints(done.stderr)
    assert hints and all(h.endswith(" --local") for h in hints), done.stderr


def test_a_lookup_without_a_door_keeps_its_hints_as_they_are(phalanx_home: Path) -> None:
    done = phalanx_cli("get", "zz")
    assert done.stderr == "error: no experiment 'zz'; `phalanx ls` lists them\n"


def test_a_removal_without_a_door_keeps_its_hints_as_they_are(phalanx_home: Path) -> None:
    done = phalanx_cli("delete", "0123456789ab", "--yes")
    assert done.stderr == "error: no experiment '0123456789ab'; `phalanx ls` lists them\n"


def test_a_hint_naming_a_command_without_that_door_is_left_as_it_is() -> None:
    url = "http://127.0.0.1:9"
    text = (
        "log in with `phalanx login URL --token TOKEN`; `phalanx gc`; `phalanx group get|stop|resume g1`;"
        f" `phalanx logs 3f -f --server {url}`; `phalanx ls --group g1`"
    )
    assert on_door(text, url, False) == (
        "log in with `phalanx login URL --token TOKEN`; `phalanx gc`; `phalanx group get|stop|resume g1`;"
        f" `phalanx logs 3f -f --server {url}`; `phalanx ls --group g1 --server {url}`"
    )
    assert (
        on_door("`phalanx alert ls`, `phalanx ls`", None, True) == "`phalanx alert ls`, `phalanx ls --local`"
    )
    assert on_door("`phalanx ls`", None, False) == "`phalanx ls`"
    there = "ask a server admin (`phalanx admin user enable ada` on the server's machine)"
    assert on_door(there, url, False) == there
