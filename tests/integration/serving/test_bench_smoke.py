"""bench/serve.py runs end to end at a tiny size (its figures are not asserted: timing is bench's)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("onnxruntime")

REPO = Path(__file__).resolve().parents[3]


def test_the_serving_bench_measures_every_configuration(phalanx_home: Path, tmp_path: Path) -> None:
    out = tmp_path / "serve.json"
    args = ["--requests", "8", "--clients", "2", "--rounds", "1", "--hidden", "8", "--json", str(out)]
    args.append("--skip-mlflow")  # MLflow's venv is built on first use: not in the suite
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "serve.py"), *args],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(out.read_text())["results"]
    assert len(results) == 8  # in-process and 3 server settings, at 1 and 2 clients
    assert all(r["requests"] >= 8 and r["throughput_rps"] > 0 for r in results.values())
