"""`phalanx run --detach` before its supervisor is in the background: the file's notes shown by the
command itself (it validates the file), and a Ctrl-C while it starts naming the experiment, which
may run on (docs/cli-speed.md). In this process: the Runner's start is stood in for."""

from __future__ import annotations

from pathlib import Path

import pytest

from phalanx.runner import LaunchOptions, Runner, Submitted
from tests.support.cli import phalanx_cli


def test_run_detach_shows_the_files_notes_and_prints_the_id(
    phalanx_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = tmp_path / "e.yml"
    spec.write_text("version: 1\nkind: experiment\nlogging:\n  level: INFO\nrun:\n  cmd: python -c pass\n")
    asked: list[LaunchOptions] = []

    def submitted(self: Runner, spec: object, options: LaunchOptions, **kwargs: object) -> Submitted:
        asked.append(options)
        assert kwargs["fork"] is True  # the supervisor is forked from the command
        assert options.experiment_id is not None
        return Submitted(options.experiment_id, None, tmp_path / "supervisor.log")  # type: ignore[arg-type]

    monkeypatch.setattr(Runner, "submit", submitted)
    done = phalanx_cli("run", "-f", spec, "--detach")
    assert done.returncode == 0, done.stderr
    assert "note: " in done.stderr
    assert "logging: accepted for Polyaxon compatibility and ignored" in done.stderr
    assert done.stdout == f"{asked[0].experiment_id}\n"


def test_a_ctrl_c_while_run_detach_starts_names_the_experiment(
    phalanx_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = tmp_path / "e.yml"
    spec.write_text("version: 1\nkind: experiment\nrun:\n  cmd: sleep 60\n")
    asked: list[LaunchOptions] = []

    def interrupted(self: Runner, spec: object, options: LaunchOptions, **kwargs: object) -> Submitted:
        asked.append(options)
        raise KeyboardInterrupt

    monkeypatch.setattr(Runner, "submit", interrupted)
    done = phalanx_cli("run", "-f", spec, "--detach")
    assert done.returncode == 130, done.stderr
    exp_id = asked[0].experiment_id
    assert exp_id is not None and len(exp_id) == 12
    assert f"experiment {exp_id} may have started" in done.stderr
    assert f"`phalanx stop {exp_id}` stops it" in done.stderr and "Traceback" not in done.stderr
    assert done.stdout == ""
