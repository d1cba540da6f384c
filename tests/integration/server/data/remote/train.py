"""Reports what the read commands show (a checkpoint too); with `hold` as its second argument,
waits to be stopped; with `fail-once`, fails until it is resumed from its checkpoint."""

import sys
import time
from pathlib import Path

from phalanx import Task

print("hello from the script", flush=True)
if sys.argv[2:] == ["hold"]:
    time.sleep(600)
task = Task.init(project_name="remote-tests", task_name="remote-reads")
if sys.argv[2:] == ["fail-once"] and task.latest_checkpoint() is None:
    task.save_checkpoint({"w": 0}, step=1)
    sys.exit(3)  # the first attempt fails; `phalanx resume` continues from step 1
task.connect({"lr": float(sys.argv[1]), "layers": 2})
log = task.get_logger()
for i in range(3):
    log.report_scalar("loss", "train", value=float(sys.argv[1]) / (i + 1), iteration=i)
log.report_text("done training")
task.save_checkpoint({"w": 1}, step=2, metrics={"loss": float(sys.argv[1]) / 3})
log.report_table("results", "final", iteration=2, table_plot=[["lr", "loss"], [float(sys.argv[1]), 0.5]])
Path("out").mkdir(exist_ok=True)
Path("out/weights.txt").write_text("w = 1\n")
task.upload_artifact("summary", artifact_object={"best": 0.5})
task.upload_artifact("outdir", artifact_object=Path("out"))
print("bye", flush=True)
