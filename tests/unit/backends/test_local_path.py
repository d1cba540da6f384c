"""`env: {PATH: ...}` in an experiment file reaches the replicas on the local engine (it was replaced
by this machine's PATH without a word), after the experiment's interpreter, ``$PATH`` in it being
this machine's."""

from __future__ import annotations

from pathlib import Path

import pytest

from phalanx.backends.local.engine import LocalBackend
from phalanx.config import Settings
from tests.unit.backends.conftest import context, plan


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (None, "/opt/venv/bin:/usr/bin:/bin"),
        ("/opt/tools/bin:$PATH", "/opt/venv/bin:/opt/tools/bin:/usr/bin:/bin"),
        ("${PATH}:/opt/tools/bin", "/opt/venv/bin:/usr/bin:/bin:/opt/tools/bin"),
        ("/opt/only", "/opt/venv/bin:/opt/only"),
        ("$PATH_EXTRA:$PATH", "/opt/venv/bin:$PATH_EXTRA:/usr/bin:/bin"),  # only PATH is the machine's
        ("", "/opt/venv/bin"),  # no empty entry: it would be the current folder
    ],
)
def test_a_files_path_follows_the_interpreters_folder(
    given: str | None, expected: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    env = {} if given is None else {"PATH": given}
    dry = LocalBackend(Settings(home=tmp_path)).dry_run(plan(workers=1, env=env), context())
    assert {p.env["PATH"] for unit in dry.units for p in unit.processes} == {expected}
