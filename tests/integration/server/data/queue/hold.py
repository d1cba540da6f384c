"""A replica that records its CPU affinity and when it ran (a line appended to PROBE/runs.log at
start and at end: one small O_APPEND write each, never interleaved), waits at most 300 s for the
file GO, then reports POINTS points of `loss`."""

import os
import sys
import time
from pathlib import Path

from phalanx import Task

probe, go, points = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
me = f"{os.environ['PHALANX_EXPERIMENT_ID']} {os.environ['PHALANX_REPLICA']}"
cpus = ",".join(str(c) for c in sorted(os.sched_getaffinity(0)))


def record(event: str) -> None:
    fd = os.open(probe / "runs.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(fd, f"{event} {time.time():.6f} {me} {cpus}\n".encode())
    os.close(fd)


record("start")
end = time.time() + 300
while not go.exists() and time.time() < end:
    time.sleep(0.05)
log = Task.init(project_name="queue-tests", task_name="queued").get_logger()
for i in range(points):
    log.report_scalar("loss", os.environ["PHALANX_REPLICA"], value=1.0 / (i + 1), iteration=i)
record("end")
