"""Report the learning rate this replica was started with, as a metric and a line."""

import sys

from phalanx import Task

lr = float(sys.argv[1])
print(f"training with lr={lr}", flush=True)
Task.init(project_name="rerun-ui", task_name="rerun-me").get_logger().report_scalar("lr", "lr", lr, 0)
