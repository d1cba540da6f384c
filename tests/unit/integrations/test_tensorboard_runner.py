"""`python -m phalanx.integrations.tensorboard SCRIPT`: outside an experiment it says, in one line on
stderr, that it records nothing and how to run the script in one, and runs the script all the same;
inside one it says nothing (docs/integrations.md)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from phalanx.integrations import tensorboard
from phalanx.tracking.identity import ENV_EXPERIMENT


class Replaced(Exception):
    """os.execve was called: the program would have replaced this process."""


@pytest.fixture
def execs(monkeypatch: pytest.MonkeyPatch, phalanx_home: Path) -> list[list[str]]:
    """The argv each os.execve got (in-process: nothing is started, this process is not replaced)."""
    calls: list[list[str]] = []

    def execve(path: str, argv: list[str], env: dict[str, str]) -> None:
        assert env[tensorboard.ENV_CAPTURE] == "1"
        calls.append(argv)
        raise Replaced

    monkeypatch.setattr(os, "execve", execve)
    return calls


def test_outside_an_experiment_it_says_it_records_nothing_and_runs_the_script(
    execs: list[list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    assert ENV_EXPERIMENT not in os.environ
    with pytest.raises(Replaced):
        tensorboard.main(["tb.py", "--epochs", "3"])
    assert [argv[1:] for argv in execs] == [["tb.py", "--epochs", "3"]]
    assert capsys.readouterr().err == (
        "phalanx: TensorBoard capture records nothing here: this does not run inside a Phalanx experiment"
        " (PHALANX_EXPERIMENT_ID is not set), and the scalars go nowhere unless the script calls"
        " Task.init(); run it in one as the experiment file's command (`run.cmd: python -m"
        " phalanx.integrations.tensorboard tb.py --epochs 3`, then `phalanx run -f FILE`)\n"
    )


def test_inside_an_experiment_it_says_nothing(
    execs: list[list[str]], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_EXPERIMENT, "3f2a9c0d41be")
    with pytest.raises(Replaced):
        tensorboard.main(["-m", "train", "--lr", "0.1"])
    assert [argv[1:] for argv in execs] == [["-m", "train", "--lr", "0.1"]]
    assert capsys.readouterr().err == ""
