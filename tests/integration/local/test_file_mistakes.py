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
        done = phalanx.cli(*command, "-f", str(a), "--file", str(b))  # refused: in this process
        assert done.returncode == 2, (command, done.stdout)
        assert (
            f"-f given 2 times ({a}, {b})" in done.stderr
            and "Phalanx reads one experiment file" in done.stderr
        )
        assert "Traceback" not in done.stderr
    assert not (phalanx.home / "phalanx.db").exists()
    assert phalanx.cli("check", "-f", str(a)).returncode == 0


def test_an_empty_optional_param_adds_no_argument_and_check_says_so(phalanx: Phalanx) -> None:
    """`{{ extra }}` with `extra: ""` reached the script as an empty argument ('') and broke files
    written for Polyaxon 0.x, which substituted text: argparse refused the stray ''."""
    spec = phalanx.spec(
        """
        version: 1
        kind: experiment
        params: {extra: "", lr: 0.1}
        run:
          cmd: python -c "import sys; print('ARGS', sys.argv[1:])" --lr={{ lr }} {{ extra }}
        """
    )
    checked = phalanx.cli("check", "-f", str(spec))
    assert checked.returncode == 0, checked.stderr
    assert "note: " in checked.stderr and "{{ extra }} is empty, so it adds no argument" in checked.stderr
    ran = phalanx.run("run", "-f", str(spec))
    assert ran.returncode == 0, ran.stderr
    assert "ARGS ['--lr=0.1']" in ran.stdout
    given = phalanx.run("run", "-f", str(spec), "--param", "extra=--verbose")
    assert "ARGS ['--lr=0.1', '--verbose']" in given.stdout
