"""A replica that reports a few points; the replica named by the first argument exits 3 instead,
and with a second argument `hold` every replica waits to be stopped after saying hello (saying
"released" once when a file `released` appears in its folder)."""

import os
import sys
import time

from phalanx import Task

replica = os.environ.get("PHALANX_REPLICA", "?")
print(f"hello from {replica}", flush=True)
if sys.argv[1:2] == [replica]:
    print(f"{replica} fails on purpose", flush=True)
    sys.exit(3)
if sys.argv[2:] == ["hold"]:
    deadline = time.monotonic() + 600
    while not os.path.exists("released") and time.monotonic() < deadline:
        time.sleep(0.1)
    if os.path.exists("released"):
        print(f"{replica} released", flush=True)
    time.sleep(max(0.0, deadline - time.monotonic()))
log = Task.init(project_name="submit-tests", task_name="submitted").get_logger()
for i in range(3):
    log.report_scalar("loss", replica, value=1.0 / (i + 1), iteration=i)
