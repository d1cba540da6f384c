"""`phalanx ls >&-` and `phalanx ls | head -0`, in a real process (what a shell does to it cannot be
done in-process): a closed stdout ends a command that writes with one line on stderr and status 1,
as coreutils do (`ls >&-`: "write error: Bad file descriptor"); a reader that went away ends it with
141 and nothing said (tests/unit/cli/test_cut_pipe.py: the same, in-process). The lean door
(cli/lean.py) and Typer's alike.

Before: with stdout closed every command died of an AttributeError traceback (Python leaves
sys.stdout None), status 1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from phalanx.config import Settings
from phalanx.store import open_store

REFUSED = "phalanx: cannot write the output: stdout is closed (Bad file descriptor)"


@pytest.fixture
def made(phalanx_home: Path) -> str:
    store = open_store(Settings())
    try:
        return store.create_experiment(name="e", project="p", backend="local").id
    finally:
        store.close()


# the lean door (cli/lean.py), then Typer's; MADE stands for the experiment's id
COMMANDS = [["ls"], ["ls", "-o", "json"], ["ls", "--local"], ["get", "MADE"], ["--help"]]


def _args(command: list[str], made: str) -> list[str]:
    return [made if a == "MADE" else a for a in command]


def _said(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if not line.startswith("phalanx: on ")]


@pytest.mark.parametrize("command", COMMANDS)
def test_a_closed_stdout_is_one_line_and_status_1(made: str, command: list[str]) -> None:
    args = _args(command, made)
    done = subprocess.run(
        ["/bin/sh", "-c", 'exec "$@" >&-', "sh", sys.executable, "-m", "phalanx.cli.main", *args],
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
    )
    assert (done.returncode, _said(done.stderr)) == (1, [REFUSED]), done.stderr


@pytest.mark.parametrize("command", COMMANDS)
def test_a_reader_gone_is_status_141_and_nothing_said(made: str, command: list[str]) -> None:
    args = _args(command, made)
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "phalanx.cli.main", *args],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert (done.returncode, _said(done.stderr)) == (141, []), done.stderr


def test_a_command_that_writes_nothing_still_works_with_stdout_closed(made: str) -> None:
    """Descriptor 1 is held for the closed stdout, so the store the command opens is not written
    through it, and a command with nothing to print ends as it would have."""
    done = subprocess.run(
        ["/bin/sh", "-c", 'exec "$@" >&-', "sh", sys.executable, "-m", "phalanx.cli.main", "get", "zz"],
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "no experiment 'zz'" in done.stderr and "Traceback" not in done.stderr
    listed = subprocess.run(
        [sys.executable, "-m", "phalanx.cli.main", "ls", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert [e["id"] for e in json.loads(listed.stdout)] == [made]


def test_a_child_the_command_starts_finds_stdout_closed_as_the_command_did() -> None:
    """The stand-in on a closed descriptor is the command's own: a process it starts (a service, a
    notebook server keeping phalanx's stdout) finds the descriptor closed, as it was given, and its
    prints are dropped by Python (sys.stdout None), not failed with "Bad file descriptor"."""
    probe = (
        "import subprocess, sys; from phalanx.cli.main import _stand_in_for_closed_streams;"
        " _stand_in_for_closed_streams();"
        " subprocess.run([sys.executable, '-c', 'import sys; sys.stderr.write(repr(sys.stdout))'],"
        " check=True)"
    )
    done = subprocess.run(
        ["/bin/sh", "-c", 'exec "$@" >&-', "sh", sys.executable, "-c", probe],
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
    )
    assert (done.returncode, done.stderr) == (0, "None"), done.stderr
