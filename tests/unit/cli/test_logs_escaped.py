"""`phalanx logs ID` of an experiment whose replica printed escape sequences (a terminal title, a
screen clear) writes them visibly escaped to a terminal, colours kept, on both doors (this machine's
store, a server's after `phalanx login`); a file or pipe and `-o json` get the exact text."""

from __future__ import annotations

import io
import json
import sys

import pytest

from phalanx.cli import main as cli_main
from phalanx.store.base import Store
from tests.support.cli import phalanx_cli
from tests.unit.server import fill

HOSTILE = "\x1b]0;PWNED-TITLE\x07\x1b[2J\x1b[31mRED\x1b[0m\r 50%"
SHOWN = "\\x1b]0;PWNED-TITLE\\x07\\x1b[2J\x1b[31mRED\x1b[0m\r 50%"


class Terminal(io.StringIO):
    """sys.stdout as a reader's terminal: it says it is one."""

    def isatty(self) -> bool:
        return True


def on_terminal(monkeypatch: pytest.MonkeyPatch, *args: str) -> str:
    """What `phalanx ARGS`, run in this process, writes to a terminal on stdout."""
    terminal = Terminal()
    with monkeypatch.context() as patched:
        patched.setattr(sys, "stdout", terminal)
        try:
            cli_main.main(list(args))
        except SystemExit as exc:
            assert exc.code in (0, None), exc.code
    return terminal.getvalue()


def test_logs_on_a_terminal_show_escape_sequences_escaped_and_keep_colours(
    door: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    exp = fill.experiment(door, n_workers=0)
    fill.log_lines(door, exp.id, "master", ["epoch 1", HOSTILE])
    assert on_terminal(monkeypatch, "logs", exp.id) == f"[master] epoch 1\n[master] {SHOWN}\n"
    assert on_terminal(monkeypatch, "logs", exp.id, "--replica", "master") == f"epoch 1\n{SHOWN}\n"
    piped = phalanx_cli("logs", exp.id)  # a file or pipe: the exact text
    assert piped.returncode == 0 and piped.stdout == f"[master] epoch 1\n[master] {HOSTILE}\n"
    as_json = phalanx_cli("logs", exp.id, "-o", "json")
    assert [json.loads(line)["text"] for line in as_json.stdout.splitlines()] == ["epoch 1", HOSTILE]


def test_what_a_job_reported_is_shown_escaped_in_the_params_and_metrics_tables(
    door: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A parameter's value and a metric's title come from the job too: `phalanx params` and
    `phalanx metrics` show their escape sequences, as `phalanx get` does."""
    exp = fill.experiment(door, n_workers=0)
    fill.param(door, exp.id, "Args", "note", "\x1b]52;c;cm0gLXJmIH4=\x07")
    fill.scalars(door, exp.id, "loss\x1b]0;T\x07", "master", [0.5])
    params = on_terminal(monkeypatch, "params", exp.id)
    assert "\\x1b]52;c;cm0gLXJmIH4=\\x07" in params and "\x1b" not in params, params
    metrics = on_terminal(monkeypatch, "metrics", exp.id)
    assert "loss\\x1b]0;T\\x07" in metrics and "\x1b" not in metrics, metrics


def test_a_pipe_gets_what_the_job_reported_exactly_from_every_read_command(door: Store) -> None:
    """A file or a pipe gets a value's and a title's escape sequences as reported, as `phalanx
    logs` gives its lines (`phalanx params ID | grep` sees what the job wrote): no command strips
    them off the way an echo to a pipe would."""
    exp = fill.experiment(door, n_workers=0)
    red = "\x1b[31mRED\x1b[0m"
    fill.param(door, exp.id, "Args", "note", red)
    fill.scalars(door, exp.id, f"loss {red}", "master", [0.5])
    for command in (["params", exp.id], ["get", exp.id], ["metrics", exp.id]):
        piped = phalanx_cli(*command)
        assert piped.returncode == 0 and red in piped.stdout, (command, piped.stdout)
