"""`phalanx run --help` and `phalanx group run --help` list every exit status docs/running.md does,
69 (a server or the database could not be reached) included: it was missing from both."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli import phalanx_cli


@pytest.mark.parametrize("command", [("run",), ("group", "run")])
def test_the_help_lists_exit_status_69(phalanx_home: Path, command: tuple[str, ...]) -> None:
    done = phalanx_cli(*command, "--help")
    said = " ".join(done.stdout.split())
    assert done.returncode == 0, done.stderr
    assert "130 stopped" in said and "69 server or database unreachable" in said, said
