"""`phalanx rerun` / `resume` of a plain script's run (`python train.py` with Task.init) refuses
with exit 2 and tells the user what to do instead: not `phalanx run -f FILE`, which they never used."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import typer

from phalanx.cli.resume import _launch_of


class _Store:
    def repro(self, experiment_id: str) -> dict[str, object]:
        return {"git": None, "snapshot": {"path": "_source/source.tar.gz"}, "launch": None}


def test_a_plain_scripts_run_is_refused_naming_the_script_not_a_file(
    capsys: pytest.CaptureFixture[str],
) -> None:
    exp = SimpleNamespace(id="abc123", name="train", backend="script", spec_text=None)
    with pytest.raises(typer.Exit) as raised:
        _launch_of(_Store(), exp)
    assert raised.value.exit_code == 2
    err = capsys.readouterr().err
    assert "plain script" in err and "Task.init" in err and "run -f" not in err
