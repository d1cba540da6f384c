"""Every bench script runs: `python bench/X.py --smoke` (tiny sizes, one round) exits 0.

`make bench` broke once without anyone seeing it (bench/sweep.py called a function a refactor
removed): mypy now covers bench/, and this runs each script. Its figures are not asserted: timing
belongs to the benches themselves, not to the suite.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.conftest import REPO

SCRIPTS = sorted((REPO / "bench").glob("*.py"))


def test_every_bench_script_is_found() -> None:
    assert {p.name for p in SCRIPTS} >= {
        "launch.py",
        "tracking.py",
        "sweep.py",
        "server_load.py",
        "scale.py",
        "query.py",
    }


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_bench_runs_at_tiny_sizes(script: Path, phalanx_home: Path, tmp_path: Path) -> None:
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")])),
    )
    done = subprocess.run(
        [sys.executable, str(script), "--smoke"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert done.returncode == 0, (
        f"{script.name} --smoke exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
