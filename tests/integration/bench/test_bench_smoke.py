"""Every bench script runs: `python bench/X.py --smoke` (tiny sizes, one round) exits 0.

`make bench` broke once without anyone seeing it (bench/sweep.py called a function a refactor
removed): mypy now covers bench/, and this runs each script. Its figures are not asserted: timing
belongs to the benches themselves, not to the suite.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.conftest import REPO

SCRIPTS = sorted((REPO / "bench").glob("*.py"))
# serve.py's smoke run has its own test below, which also reads the figures it writes
SMOKED = [p for p in SCRIPTS if p.name != "serve.py"]


def bench_env() -> dict[str, str]:
    return dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")])),
    )


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
@pytest.mark.parametrize("script", SMOKED, ids=[p.stem for p in SMOKED])
def test_bench_runs_at_tiny_sizes(script: Path, phalanx_home: Path, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(script), "--smoke"],
        cwd=tmp_path,
        env=bench_env(),
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert done.returncode == 0, (
        f"{script.name} --smoke exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )


@pytest.mark.slow
def test_the_serving_bench_measures_every_configuration(phalanx_home: Path, tmp_path: Path) -> None:
    """bench/serve.py --smoke (8 requests, 2 clients, one round, no MLflow: its venv is built on
    first use) writes a figure for each configuration; the figures themselves are bench's."""
    pytest.importorskip("onnxruntime")
    out = tmp_path / "serve.json"
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "serve.py"), "--smoke", "--json", str(out)],
        cwd=tmp_path,
        env=bench_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(out.read_text())["results"]
    assert len(results) == 8  # in-process and 3 server settings, at 1 and 2 clients
    assert all(r["requests"] >= 8 and r["throughput_rps"] > 0 for r in results.values())
