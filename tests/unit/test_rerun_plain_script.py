"""`phalanx rerun` / `resume` (and the server's clone) of a plain script's run (`python train.py`
with Task.init) refuse with a UsageError (exit 2, 400) that tells the user what to do instead: not
`phalanx run -f FILE`, which they never used."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from phalanx.domain import DECLARED_PARAMS
from phalanx.errors import UsageError, exit_status
from phalanx.runner.options import LaunchOptions
from phalanx.runner.rerunning import launch_of


class _Store:
    def repro(self, experiment_id: str) -> dict[str, object]:
        return {"git": None, "snapshot": {"path": "_source/source.tar.gz"}, "launch": None}


def test_a_plain_scripts_run_is_refused_naming_the_script_not_a_file() -> None:
    exp: Any = SimpleNamespace(id="abc123", name="train", backend="script", spec_text=None)
    with pytest.raises(UsageError) as raised:
        launch_of(_Store(), exp)  # type: ignore[arg-type]
    assert exit_status(raised.value) == 2
    said = str(raised.value)
    assert "plain script" in said and "Task.init" in said and "run -f" not in said


def test_an_experiment_launched_plainly_records_its_params_in_the_declared_section() -> None:
    """LaunchOptions spells domain.DECLARED_PARAMS out (run --detach loads no domain model)."""
    assert LaunchOptions().params_section == DECLARED_PARAMS
