"""Reports through a Phalanx server (PHALANX_HOST) in two halves, pausing between them on marker files
so the test can stop and restart the server while points are being reported."""

import sys
import time
from pathlib import Path

from phalanx import Task

marks = Path(sys.argv[1])
n = int(sys.argv[2])


def wait_for(name: str) -> None:
    deadline = time.monotonic() + 120
    while not (marks / name).exists():
        if time.monotonic() > deadline:
            sys.exit(f"no {name} marker within 120 s")
        time.sleep(0.05)


task = Task.init(project_name="remote", task_name="server restart")
(marks / "id").write_text(task.id)
log = task.get_logger()
for i in range(n // 2):
    log.report_scalar("loss", "worker 00", value=1.0 / (i + 1), iteration=i)
task.flush()  # the first half reached the server
(marks / "half").touch()
wait_for("server-down")
for i in range(n // 2, n):
    log.report_scalar("loss", "worker 00", value=1.0 / (i + 1), iteration=i)
print("second half reported while the server was down", flush=True)
(marks / "reported").touch()
wait_for("server-up")
task.close()  # returns once the server has accepted everything
(marks / "closed").touch()
