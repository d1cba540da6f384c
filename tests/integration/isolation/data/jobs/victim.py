"""Another project's ordinary job: it reads its dataset input, keeps its secret in its environment,
writes its own work, stores a checkpoint and an artifact, then runs until it is stopped. Started
again (`phalanx resume`), it finds its checkpoint, says so, with the account it runs as and whether
it sees the server's home, and ends."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from phalanx import Task

task = Task.init()
latest = task.latest_checkpoint()
if latest is not None:
    print(
        f"RESUMED step={latest.step} state={task.load_checkpoint(latest)!r} uid={os.getuid()}"
        f" home={os.environ.get('PHALANX_HOME')!r}",
        flush=True,
    )
    sys.exit(0)
data = Path(os.environ["PHALANX_INPUT_DIGITS"])
print(f"VICTIM input {sorted(p.name for p in data.iterdir())}", flush=True)
Path("victim-output.txt").write_text("the victim's own work\n")
task.save_checkpoint({"weights": [1, 2, 3]}, step=5)
task.upload_artifact("notes", artifact_object={"secret-ish": "victim notes"})
task.flush()
print(f"VICTIM READY pid={os.getpid()} uid={os.getuid()}", flush=True)
time.sleep(600)
