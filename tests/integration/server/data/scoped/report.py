"""A replica that reports a point and a file through the server (PHALANX_HOST), and checks that its
token is an experiment token that cannot read the experiment list."""

import json
import os
import urllib.error
import urllib.request

from phalanx import Task

token = os.environ["PHALANX_TOKEN"]
task = Task.current_task()
task.get_logger().report_scalar("loss", "s", 0.5, 1)
task.upload_artifact("cfg", {"a": 1})
request = urllib.request.Request(
    os.environ["PHALANX_HOST"] + "/api/v1/experiments", headers={"Authorization": f"Bearer {token}"}
)
try:
    urllib.request.urlopen(request, timeout=30)
    listed = "yes"
except urllib.error.HTTPError as exc:
    listed = str(exc.code)
print(json.dumps({"scoped": token.startswith("phx-exp."), "list": listed}), flush=True)
assert task.flush(timeout=60)
