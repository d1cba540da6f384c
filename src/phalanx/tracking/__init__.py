"""The tracking SDK: what a training script calls to report into its Phalanx experiment.

Standard library only, so it imports inside any replica's environment::

    from phalanx import Task
    task = Task.init(project_name="examples", task_name="test torch distributed")
    task.get_logger().report_scalar("loss", "worker 00", value=0.3, iteration=i)
    task.upload_artifact("temp 00", artifact_object={"worker_rank": 0})
    task.connect({"worker_0_stuff": "some stuff"})

See docs/tracking.md.
"""

from __future__ import annotations

from phalanx.tracking.task import Logger, Task, log_metrics

__all__ = ["Logger", "Task", "log_metrics"]
