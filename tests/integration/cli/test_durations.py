"""`phalanx ls` / `get` durations: from the replicas' start, not from when the store was opened.
The commands run in this process (tests/support/cli.py); the replica is a real process."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.cli import phalanx_cli


def test_a_short_experiment_lasts_as_long_as_its_replica_ran(phalanx_home: Path, tmp_path: Path) -> None:
    path = tmp_path / "short.yml"
    path.write_text('version: 1\nkind: experiment\nrun:\n  cmd: python -c "import time; time.sleep(1.5)"\n')
    done = phalanx_cli("run", "-f", path, "-o", "json")
    assert done.returncode == 0, done.stderr
    exp_id = json.loads(done.stdout)["id"]
    shown = phalanx_cli("get", exp_id, "-o", "json")
    doc = json.loads(shown.stdout)
    assert doc["finished_at"] - doc["started_at"] >= 1.5
    assert doc["started_at"] >= doc["created_at"] - 5
