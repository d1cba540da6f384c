"""`phalanx ls` / `get` durations: from the replicas' start, not from when the store was opened."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

PHALANX = Path(sys.executable).parent / "phalanx"


def test_a_short_experiment_lasts_as_long_as_its_replica_ran(phalanx_home: Path, tmp_path: Path) -> None:
    path = tmp_path / "short.yml"
    path.write_text('version: 1\nkind: experiment\nrun:\n  cmd: python -c "import time; time.sleep(1.5)"\n')
    done = subprocess.run(
        [str(PHALANX), "run", "-f", str(path), "-o", "json"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    exp_id = json.loads(done.stdout)["id"]
    shown = subprocess.run(
        [str(PHALANX), "get", exp_id, "-o", "json"], capture_output=True, text=True, timeout=120
    )
    doc = json.loads(shown.stdout)
    assert doc["finished_at"] - doc["started_at"] >= 1.5
    assert doc["started_at"] >= doc["created_at"] - 5
