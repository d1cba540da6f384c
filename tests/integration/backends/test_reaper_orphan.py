"""A replica's reaper whose engine died while it was starting writes nothing: no log folder, no
status. It used to go through its run loop, and re-created the run folder (logs/) that the next
`phalanx` reader had just removed as what a SIGKILLed `phalanx run` left of a never-recorded start."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from phalanx.backends.local import leaders


def test_a_reaper_whose_parent_died_before_it_started_writes_nothing(tmp_path: Path) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a pid that is not our reaper's parent: its engine "died"
    run = tmp_path / "runs" / "exp"
    config = {
        "name": "master",
        "processes": [{"argv": ["sleep", "60"], "cwd": str(tmp_path), "env": {}}],
        "log": str(run / "logs" / "master.log"),
        "status": str(run / "master.status.json"),
        "parent": gone.pid,
        "grace": 1.0,
    }
    cfg = tmp_path / "master.json"
    cfg.write_text(json.dumps(config))
    done = subprocess.run(
        [sys.executable, "-E", "-c", leaders._REAPER_BOOT, leaders._PACKAGE_ROOT, str(cfg)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "Traceback" not in done.stderr, done.stderr
    assert not run.exists(), sorted(str(p) for p in run.rglob("*"))
