"""Experiment-file mistakes a user meets at the command line: several -f files, empty params."""

from __future__ import annotations

from .conftest import Phalanx

FILE = """
version: 1
kind: experiment
run:
  cmd: echo ran
"""


def test_several_files_are_refused_instead_of_the_last_silently_winning(phalanx: Phalanx) -> None:
    a = phalanx.spec(FILE, name="a.yml")
    b = phalanx.spec(FILE, name="b.yml")
    for command in (("run",), ("check",), ("group", "run")):
        done = phalanx.run(*command, "-f", str(a), "--file", str(b))
        assert done.returncode == 2, (command, done.stdout)
        assert (
            f"-f given 2 times ({a}, {b})" in done.stderr
            and "Phalanx reads one experiment file" in done.stderr
        )
        assert "Traceback" not in done.stderr
    assert not (phalanx.home / "phalanx.db").exists()
    assert phalanx.run("check", "-f", str(a)).returncode == 0
