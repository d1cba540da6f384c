"""``Run.get_context()``: Azure ML's in-script tracking names over Phalanx's task. Standard library only.

Seed 004's next step is Azure's "track run metrics": a training script does ::

    from phalanx import Run          # azureml.core.Run in Azure
    run = Run.get_context()
    run.log("accuracy", acc)

and must run unchanged. Inside a replica (PHALANX_EXPERIMENT_ID set, or after ``Task.init``) the
context is the experiment's task seen through Azure's names; every call becomes the same event
``Task`` writes, so it carries the writer's replica and rank like every report, and a metric's series
is the writer's replica (or ``rank N`` when a replica runs several processes: ``log_metrics``'s rule).
Outside any experiment, as in Azure, it is an offline run: every call is accepted and nothing is
recorded, and no experiment is created (``Task.init`` creates one; this never does).

Azure name -> what is recorded:

- ``log(name, value)``: a scalar, title ``name``, the next step of its series.
- ``log_list(name, values)``: one scalar per value, steps 0, 1, ... (continuing after earlier ones).
- ``log_row(name, **columns)``: each number a scalar titled ``name/column`` (one step per row); a
  row with text values is also kept as a text record titled ``name``.
- ``log_image(name, path=None, plot=None)``: the image file (or a matplotlib figure as PNG) as an
  artifact ``name``.
- ``tag(key, value="")``: the parameter ``key`` in section ``tags`` (``phalanx params``).
- ``upload_file(name, path_or_stream)``: the file (or a binary stream's bytes) as an artifact ``name``
  (a path-like name such as ``outputs/model.pkl`` keeps its last part, ``model.pkl``).
"""

from __future__ import annotations

import json
import logging
import numbers
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from phalanx.errors import UsageError

if TYPE_CHECKING:
    from phalanx.tracking.task import Task

log = logging.getLogger("phalanx.tracking")

TAGS_SECTION = "tags"


class RunContext:
    """The experiment's run, seen from one process of it (what ``Run.get_context()`` returns there)."""

    def __init__(self, task: Task) -> None:
        self._task = task
        self._rows: dict[str, int] = {}

    @property
    def id(self) -> str:
        """The experiment id (``phalanx get ID``)."""
        return self._task.id

    @property
    def replica(self) -> str:
        return self._task.replica

    @property
    def rank(self) -> int | None:
        return self._task.rank

    @property
    def offline(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"Run.get_context(): experiment {self.id}, replica {self.replica}, rank {self.rank}"

    def _series(self) -> str:
        from phalanx.tracking.task import _own_series  # why: task.py hooks argparse on import

        return _own_series(self._task)

    def log(self, name: str, value: Any, description: str = "", step: int | None = None) -> None:
        """Azure's ``run.log``: one scalar point of metric ``name`` (the next step unless ``step``)."""
        self._task.get_logger().report_scalar(name, self._series(), _number(name, value), step)

    def log_list(self, name: str, value: Any, description: str = "") -> None:
        """Azure's ``run.log_list``: every value a point of metric ``name``, in order."""
        logger, series = self._task.get_logger(), self._series()
        for item in list(value):
            logger.report_scalar(name, series, _number(name, item))

    def log_row(self, name: str, description: str | None = None, **kwargs: Any) -> None:
        """Azure's ``run.log_row``: one row of table ``name``; each numeric column a point of
        ``name/column`` at the row's index, the whole row as text when it has other values."""
        row = self._rows.get(name, 0)
        self._rows[name] = row + 1
        logger, series = self._task.get_logger(), self._series()
        others = {}
        for column, value in kwargs.items():
            if isinstance(value, numbers.Real) and not isinstance(value, bool):
                logger.report_scalar(f"{name}/{column}", series, float(value), row)
            else:
                others[column] = value
        if others:
            text = json.dumps(kwargs, default=str, sort_keys=True)
            logger.report_text(text, title=name, iteration=row)

    def log_image(
        self, name: str, path: str | os.PathLike[str] | None = None, plot: Any = None, description: str = ""
    ) -> None:
        """Azure's ``run.log_image``: an image file, or a matplotlib figure (saved as PNG), stored as
        artifact ``name``. Give exactly one of ``path`` and ``plot``."""
        if (path is None) == (plot is None):
            raise UsageError(f"log_image({name!r}): give either path= (an image file) or plot= (a figure)")
        name = _artifact_name(name)
        if path is not None:
            self._task.upload_artifact(name, artifact_object=Path(path))
            return
        figure = getattr(plot, "gcf", lambda: plot)()  # matplotlib.pyplot itself, or a Figure
        with tempfile.TemporaryDirectory(prefix="phalanx-image-") as tmp:
            target = Path(tmp) / f"{_safe_file_name(name)}.png"
            figure.savefig(target, format="png")
            self._task.upload_artifact(name, artifact_object=target)

    def tag(self, key: str, value: Any = "") -> None:
        """Azure's ``run.tag``: recorded as the parameter ``key`` in section ``tags``."""
        self._task._reporter.event("param", {"section": TAGS_SECTION, "values": {str(key): _jsonable(value)}})

    def set_tags(self, tags: dict[str, Any]) -> None:
        for key, value in tags.items():
            self.tag(key, value)

    def upload_file(self, name: str, path_or_stream: Any) -> None:
        """Azure's ``run.upload_file``: a file path, or a binary stream (its remaining bytes), stored
        as artifact ``name``."""
        name = _artifact_name(name)
        if isinstance(path_or_stream, str | os.PathLike):
            self._task.upload_artifact(name, artifact_object=Path(path_or_stream))
            return
        data = path_or_stream.read()
        if isinstance(data, str):
            data = data.encode()
        with tempfile.TemporaryDirectory(prefix="phalanx-upload-") as tmp:
            target = Path(tmp) / _safe_file_name(name)
            target.write_bytes(data)
            self._task.upload_artifact(name, artifact_object=target)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until what this process reported is in the store (Task.flush)."""
        return self._task.flush() if timeout is None else self._task.flush(timeout=timeout)

    def complete(self) -> None:
        """Azure marks the run completed; here the supervisor decides the status: this only flushes."""
        self.flush()


class OfflineRun:
    """``Run.get_context()`` outside any experiment: accepts Azure's calls and records nothing, so a
    script also runs as plain ``python train.py`` without creating an experiment."""

    id = "OfflineRun"
    replica = None
    rank = None
    offline = True

    def __repr__(self) -> str:
        return "Run.get_context(): offline (not inside a Phalanx experiment; nothing is recorded)"

    def _nothing(self, *args: Any, **kwargs: Any) -> None:
        log.debug("offline run: nothing recorded")

    log = log_list = log_row = log_image = tag = set_tags = upload_file = complete = _nothing

    def flush(self, timeout: float | None = None) -> bool:
        return True


def get_context(allow_offline: bool = True) -> RunContext | OfflineRun:
    """The run of the experiment this process belongs to, or an offline run outside any (Azure's
    ``Run.get_context``). ``allow_offline=False`` raises UsageError there instead."""
    from phalanx.tracking.task import Task  # why: task.py hooks argparse on import: only when asked

    current = Task.current_task()  # None outside any experiment; never creates one
    if current is not None:
        return RunContext(current)
    if not allow_offline:
        raise UsageError(
            "Run.get_context(allow_offline=False): this process is not inside a Phalanx experiment; "
            "start it with `phalanx run` or Experiment(...).submit(...)"
        )
    return OfflineRun()


class Run:
    """``Run.get_context()`` where only the standard-library SDK is importable (a replica's own
    venv). With Phalanx installed, ``phalanx.Run`` is ``phalanx.runs.Run``, which has the same
    classmethod besides its role as the handle of a submitted experiment."""

    @classmethod
    def get_context(cls, allow_offline: bool = True) -> RunContext | OfflineRun:
        return get_context(allow_offline)


def _number(name: str, value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise UsageError(
            f"log({name!r}, {value!r}): a metric value is a number; record text with log_row or tag"
        ) from None


def _jsonable(value: Any) -> Any:
    return value if isinstance(value, str | int | float | bool) or value is None else str(value)


def _artifact_name(name: str) -> str:
    """Azure names uploads by path ("outputs/model.pkl"); an artifact name is one file name."""
    return Path(name).name if "/" in name else name


def _safe_file_name(name: str) -> str:
    cleaned = "".join(c if c.isalnum() or c in "-_." else "_" for c in name).strip("._")
    return cleaned or "file"


__all__ = ["OfflineRun", "Run", "RunContext", "get_context"]
