"""TensorBoard capture: scalars a script writes through a ``SummaryWriter`` also go to its experiment.

Part of the SDK (standard library only): ``Task.init()`` turns it on, so it lives beside the task
rather than in ``phalanx.integrations`` (which sits above the SDK); ``phalanx.integrations.tensorboard``
is its documented public name and the ``python -m`` wrapper. See that module's docstring for when
capture is on.

``SummaryWriter.add_scalar`` and ``add_scalars`` (``torch.utils.tensorboard`` and ``tensorboardX``)
are wrapped: the original still writes its event file, then the value is reported with the same
tag and step into this process's own series (``master``, ``worker-0``, ``rank N``: one per rank,
as ``log_metrics``). Nothing is imported here until the script imports TensorBoard's writer itself.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import threading
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from phalanx.tracking import series as _series
from phalanx.tracking.boot import ENV_CAPTURE

WRITER_MODULES = ("torch.utils.tensorboard.writer", "tensorboardX.writer")
_PATCHED = "__phalanx_captured__"

_lock = threading.Lock()
_finder: _WriterFinder | None = None
_bound: tuple[int, Callable[[str, str, float, int | None], None], str] | None = None  # pid, report, series


def enabled_by_env(default: bool = True) -> bool:
    """PHALANX_CAPTURE_TENSORBOARD: "0"/"false" off, "1"/"true" on, unset: ``default``."""
    value = os.environ.get(ENV_CAPTURE, "").strip().lower()
    if value in ("0", "false", "no", "off"):
        return False
    if value in ("1", "true", "yes", "on"):
        return True
    return default


def capture() -> None:
    """Capture every ``SummaryWriter``'s scalars from now on, in this process and (through the
    environment) in the Phalanx processes it starts. Idempotent; writers already imported are
    patched now, the others when they are imported."""
    global _finder, _bound
    os.environ[ENV_CAPTURE] = "1"
    _bound = None  # found again at the next point (a new Task.init, a test's fake)
    with _lock:
        for name in WRITER_MODULES:
            module = sys.modules.get(name)
            if module is not None:
                _patch(module)
        if _finder is None:
            _finder = _WriterFinder()
            sys.meta_path.insert(0, _finder)


def stop() -> None:
    """Stop capturing in this process (writers already patched report nothing more)."""
    global _finder
    os.environ[ENV_CAPTURE] = "0"
    with _lock:
        if _finder is not None:
            sys.meta_path.remove(_finder)
            _finder = None


def finder() -> importlib.abc.MetaPathFinder | None:
    """The finder that patches writers as they are imported (None: not capturing); the boot's
    sitecustomize hands it the import that turned capture on."""
    return _finder


def _capturing() -> bool:
    return _finder is not None


def _report(title: str, value: Any, step: Any) -> None:
    """One captured point into this process's series; the bound report call is kept per process
    (a few hundred nanoseconds on top of TensorBoard's own tens of microseconds)."""
    global _bound
    bound = _bound
    if bound is None or bound[0] != os.getpid():
        found = _series.target()
        if found is None:
            return
        bound = _bound = (os.getpid(), found.logger.report_scalar, found.series)
    try:
        number = float(value)
        iteration = None if step is None else int(step)
    except (TypeError, ValueError):  # a tensor of several values, a string: TensorBoard's business
        return
    bound[1](title, bound[2], number, iteration)


def _patch(module: ModuleType) -> None:
    """Wrap ``module.SummaryWriter``'s scalar methods once; the original always runs first."""
    writer = getattr(module, "SummaryWriter", None)
    if writer is None or getattr(writer, _PATCHED, False):
        return
    add_scalar = writer.add_scalar
    add_scalars = writer.add_scalars

    @functools.wraps(add_scalar)
    def captured_scalar(
        self: Any, tag: str, scalar_value: Any, global_step: Any = None, *a: Any, **k: Any
    ) -> Any:
        result = add_scalar(self, tag, scalar_value, global_step, *a, **k)
        if _capturing():
            _report(str(tag), scalar_value, global_step)
        return result

    @functools.wraps(add_scalars)
    def captured_scalars(
        self: Any, main_tag: str, tag_scalar_dict: dict[str, Any], global_step: Any = None, *a: Any, **k: Any
    ) -> Any:
        result = add_scalars(self, main_tag, tag_scalar_dict, global_step, *a, **k)
        if _capturing():
            for tag, value in tag_scalar_dict.items():
                _report(f"{main_tag}/{tag}", value, global_step)
        return result

    writer.add_scalar = captured_scalar
    writer.add_scalars = captured_scalars
    setattr(writer, _PATCHED, True)


class _WriterFinder(importlib.abc.MetaPathFinder):
    """Patches a writer module right after it is executed; every other import costs a tuple lookup."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in WRITER_MODULES:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec: importlib.machinery.ModuleSpec | None = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        original = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            original(module)
            _patch(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]  # this module's loader only
        return spec
