"""`phalanx ls -o json | head -1`: a reader that closes the pipe early ends every command the same
way, on the lean path and on Typer's, on this machine and against a server: exit status 141 (what
the shell reports for coreutils cut the same way), nothing on stderr, and stdout pointed at
/dev/null so the interpreter's flush at exit says nothing either ("Exception ignored ...").

Before: the lean `ls -o json` died of a BrokenPipeError traceback (exit 1); Typer's commands
(`logs`, `get`, `--help`) exited 1 without a word."""

from __future__ import annotations

import io
import os
import sys
import traceback
from pathlib import Path

import pytest

from phalanx.cli import main as cli_main
from tests.unit.cli.conftest import TOKEN, Served


def _cut(args: list[str]) -> tuple[int, str, bool]:
    """(exit status, stderr, whether stdout's descriptor now goes to /dev/null) of `phalanx ARGS`
    writing to a pipe whose reader has gone (a write there raises BrokenPipeError: Python ignores
    SIGPIPE)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    saved = sys.stdout, sys.stderr
    err = io.StringIO()
    sys.stdout = io.TextIOWrapper(io.FileIO(write_end, "w", closefd=False), write_through=True)
    sys.stderr = err
    try:
        try:
            cli_main.main(args)
            status = 0
        except SystemExit as exc:
            status = exc.code if isinstance(exc.code, int) else 1
        except Exception:
            err.write(traceback.format_exc())
            status = 1
        to_null = os.fstat(write_end).st_rdev == os.stat(os.devnull).st_rdev
        said = [line for line in err.getvalue().splitlines() if not line.startswith("phalanx: on ")]
        return status, "\n".join(said), to_null
    finally:
        sys.stdout, sys.stderr = saved
        os.close(write_end)


@pytest.mark.parametrize(
    "args",
    [
        ["ls", "-o", "json"],  # the lean path (cli/lean.py)
        ["ls"],
        ["ls", "-o", "json", "--local"],  # Typer's path
        ["ls", "--help"],
        ["models", "ls", "-o", "json"],
    ],
)
def test_a_closed_pipe_ends_every_command_the_same_way(phalanx_home: Path, args: list[str]) -> None:
    status, stderr, to_null = _cut(args)
    assert (status, stderr) == (cli_main.OUTPUT_CUT, ""), stderr
    assert to_null


def test_a_closed_pipe_ends_a_server_command_the_same_way(served: Served, phalanx_home: Path) -> None:
    os.environ["PHALANX_TOKEN"] = TOKEN
    try:
        status, stderr, to_null = _cut(["ls", "-o", "json", "--server", served.url])
    finally:
        del os.environ["PHALANX_TOKEN"]
    assert (status, stderr, to_null) == (cli_main.OUTPUT_CUT, "", True), stderr


def test_another_pipes_break_is_not_taken_for_a_cut_output(monkeypatch: pytest.MonkeyPatch) -> None:
    """A BrokenPipeError of another pipe (a child's stdin, a socket) while stdout's reader is still
    there is the command's own failure: it is not ended quietly with 141."""
    read_end, write_end = os.pipe()
    healthy = io.TextIOWrapper(io.FileIO(write_end, "w", closefd=False), write_through=True)
    monkeypatch.setattr(sys, "stdout", healthy)

    def fails() -> bool:
        raise BrokenPipeError(32, "Broken pipe")

    try:
        with pytest.raises(BrokenPipeError):
            cli_main._answer(fails, ["ls"])
    finally:
        os.close(read_end)
        os.close(write_end)
