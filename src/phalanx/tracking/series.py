"""Where an integration's scalars go: the process's task and its own series, found once per process.

Standard library only: part of the SDK, which installs the TensorBoard capture itself
(phalanx.tracking.tensorboard); the integrations above it use it too."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from phalanx.tracking.task import Logger, Task


@dataclass(frozen=True)
class Target:
    """A process's task, its logger and the series its points go to (see log_metrics)."""

    task: Task
    logger: Logger
    series: str


_cache: dict[int, Target | None] = {}
# how to find this process's target: set by whoever turns the capture on (Task.init, or
# phalanx.integrations.tensorboard.capture), so this module never imports the Task that imports it
_find: Callable[[], Target | None] | None = None


def use(find: Callable[[], Target | None]) -> None:
    """Find this process's target with ``find`` from now on (found again at the next point)."""
    global _find
    _find = find
    _cache.clear()


def target() -> Target | None:
    """This process's target, or None outside any experiment. Cached per pid: a forked or spawned
    rank has its own task; the rank is read once its process group exists (a Lightning rank
    reports only after ``init_process_group``), so the cache is filled on the first report."""
    pid = os.getpid()
    if pid in _cache:
        return _cache[pid]
    found = None if _find is None else _find()
    _cache.clear()
    _cache[pid] = found
    return found
