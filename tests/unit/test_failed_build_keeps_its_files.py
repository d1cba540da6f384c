"""A start whose environment build fails after its row was recorded (status building) keeps what
belongs to that row: its run folder and its spool (the build's console lines not yet ingested).
Whether it was recorded is asked of whichever store is open, the full store the build recorded into
or the lean writer (``LazyStore.any_open``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from phalanx.config import Settings
from phalanx.domain import ExperimentStatus
from phalanx.runner import LaunchOptions, Runner, running
from phalanx.spec.loader import load_spec_text
from phalanx.store import open_store


def test_a_failed_build_keeps_the_run_folder_and_spool_of_its_recorded_experiment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings(home=tmp_path / "home")
    open_store(settings).close()  # an up-to-date store: the supervisor would record through the lean writer
    monkeypatch.setattr(running, "_builds", lambda dry: True)

    def failing_build(self: Runner, spec: Any, options: Any, progress: Any = None) -> None:
        raise RuntimeError("pip failed")

    monkeypatch.setattr(Runner, "prepare", failing_build)
    spec = load_spec_text("version: 1\nkind: experiment\nrun:\n  cmd: python -c pass\n")
    with pytest.raises(RuntimeError, match="pip failed"):
        Runner(settings).run(spec, LaunchOptions(workdir=tmp_path), None, handle_signals=False)
    store = open_store(settings)
    try:
        [experiment] = store.list_experiments().items
    finally:
        store.close()
    assert experiment.status is ExperimentStatus.FAILED and "pip failed" in (experiment.reason or "")
    assert (settings.runs_dir / experiment.id).is_dir()
    assert (settings.spool_dir / experiment.id).is_dir()
