"""The layers contract (.importlinter, run by `make lint`) is live: it passes on the code as it is and
fails, naming the arrow, as soon as a lower room imports a higher one (here: a temporary module of
spec/ importing the CLI, and a server module importing the CLI) — on a copy of the package. So is
the reaper's: a replica's reaper importing the machine's planning fails it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LINT = Path(sys.executable).with_name("lint-imports")


def _lint(src: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.run(
        [str(LINT), "--config", str(REPO / ".importlinter"), "--no-cache", "--no-logo"],
        cwd=src,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture
def package_copy(tmp_path: Path) -> Path:
    if not LINT.exists():
        pytest.skip("import-linter is not installed (the dev extra)")
    src = tmp_path / "src"
    shutil.copytree(
        REPO / "src" / "phalanx", src / "phalanx", ignore=shutil.ignore_patterns("__pycache__", "ui")
    )
    return src


def test_the_layers_hold_and_an_upward_import_breaks_the_contract(package_copy: Path) -> None:
    kept = _lint(package_copy)
    assert kept.returncode == 0, kept.stdout + kept.stderr
    assert "2 kept, 0 broken" in kept.stdout  # the layers, the reaper's
    (package_copy / "phalanx" / "spec" / "upward.py").write_text(
        "def f() -> None:\n    from phalanx.cli import run  # inside a function: still an arrow\n"
    )
    broken = _lint(package_copy)
    assert broken.returncode != 0, broken.stdout
    assert "BROKEN" in broken.stdout and "phalanx.spec.upward -> phalanx.cli.run" in broken.stdout, (
        broken.stdout
    )


def test_the_server_may_not_import_the_cli(package_copy: Path) -> None:
    (package_copy / "phalanx" / "server" / "upward.py").write_text("import phalanx.cli.tracking\n")
    broken = _lint(package_copy)
    assert broken.returncode != 0, broken.stdout
    assert "phalanx.server.upward -> phalanx.cli.tracking" in broken.stdout, broken.stdout


def test_the_reaper_may_not_import_what_plans_a_machine(package_copy: Path) -> None:
    """Every replica starts a reaper: the domain model and the ledger would be paid once per replica."""
    reaper = package_copy / "phalanx" / "backends" / "local" / "reaper.py"
    lazy = "\n\ndef _plan() -> None:\n    from phalanx.machine import limits  # a lazy import counts\n"
    reaper.write_text(reaper.read_text() + lazy)
    broken = _lint(package_copy)
    assert broken.returncode != 0, broken.stdout
    assert "phalanx.backends.local.reaper -> phalanx.machine.limits" in broken.stdout, broken.stdout
