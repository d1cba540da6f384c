"""tests/support/cli.py: `phalanx ARGS` in this process gives what a process would (exit status,
stdout, stderr) and leaves this process as it found it, so the tests that use it mean what they
meant with a `phalanx` process each."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import NoReturn

import pytest

from phalanx.cli import main as cli_main
from tests.support.cli import phalanx_cli


def test_a_usage_mistake_is_its_status_and_its_message_on_stderr(tmp_path: Path) -> None:
    done = phalanx_cli("check", "-f", tmp_path / "nope.yml")
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr == f"error: {tmp_path / 'nope.yml'}: no such file\n"


def test_what_a_command_changes_in_its_process_is_put_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def command(argv: list[str]) -> NoReturn:
        os.environ["PHALANX_LEFT_BEHIND"] = "1"
        os.environ.pop("PHALANX_REMOVED_HERE")
        os.chdir(tmp_path)
        signal.signal(signal.SIGTERM, lambda *_: None)
        print("out", argv, sys.stdin.read())
        sys.stderr.write("err\n")
        os.write(1, b"written to the descriptor\n")  # as a child process's output would be
        sys.exit(3)

    monkeypatch.setenv("PHALANX_REMOVED_HERE", "1")
    monkeypatch.setattr(cli_main, "main", command)
    before = (dict(os.environ), os.getcwd(), signal.getsignal(signal.SIGTERM), sys.stdout, sys.stderr)
    done = phalanx_cli("ls", "-x", env={"PHALANX_GIVEN": "yes"}, input="typed", cwd=tmp_path.parent)
    assert (done.returncode, done.stdout, done.stderr) == (
        3,
        "out ['ls', '-x'] typed\nwritten to the descriptor\n",
        "err\n",
    )
    assert (dict(os.environ), os.getcwd(), signal.getsignal(signal.SIGTERM), sys.stdout, sys.stderr) == before


def test_an_exception_that_escapes_is_a_traceback_and_status_1(monkeypatch: pytest.MonkeyPatch) -> None:
    def command(argv: list[str]) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(cli_main, "main", command)
    done = phalanx_cli("ls")
    assert done.returncode == 1
    assert "Traceback" in done.stderr and "RuntimeError: a bug" in done.stderr


def test_the_fast_exit_of_phalanx_run_does_not_end_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """The console entry point leaves `phalanx run` by os._exit; in-process, the SystemExit goes on."""

    def command(argv: list[str]) -> None:
        cli_main._answer(lambda: sys.exit(4), argv)

    monkeypatch.setattr(cli_main, "main", command)
    assert phalanx_cli("run", "-f", "x.yml").returncode == 4
