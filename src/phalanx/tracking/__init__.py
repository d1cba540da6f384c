"""The tracking SDK: what a training script calls to report into its Phalanx experiment.

Standard library only, so it imports inside any replica's environment::

    from phalanx import Task
    task = Task.init(project_name="examples", task_name="test torch distributed")
    task.get_logger().report_scalar("loss", "worker 00", value=0.3, iteration=i)
    task.upload_artifact("temp 00", artifact_object={"worker_rank": 0})
    task.connect({"worker_0_stuff": "some stuff"})

``Task`` is loaded on first use: importing ``phalanx.spool`` (as ingest and the supervisor
do) does not install the SDK's argparse recording. See docs/tracking.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from phalanx.tracking.task import Logger, Task, log_metrics

__all__ = ["Logger", "Task", "log_metrics"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from phalanx.tracking import task  # why: no SDK hooks until a name is used

        return getattr(task, name)
    raise AttributeError(f"module 'phalanx.tracking' has no attribute {name!r}")
