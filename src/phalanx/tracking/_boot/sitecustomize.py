"""Put on PYTHONPATH of every replica by the local engine (and by ``python -m
phalanx.integrations.tensorboard``): turns TensorBoard capture on at interpreter start when
PHALANX_CAPTURE_TENSORBOARD=1, so a script that writes a SummaryWriter and never calls Phalanx is
captured; then runs the sitecustomize this one hides, if there is one. Standard library only (it is
part of the SDK copy a foreign venv gets); never fails the interpreter's start.

Every Python process of a replica runs this file, and most never write TensorBoard: at start it only
puts on ``sys.meta_path`` a finder that compares a name with two strings, and imports nothing the
interpreter has not imported already (not even ``typing``). The capture module (``importlib.abc``,
``dataclasses``, ``typing``...: about 25 ms of CPU a process, issue 42) is imported when the script
imports a SummaryWriter's module, not before. (No ``from __future__``: that too is an import.)"""

import os
import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy reads it the same way)
if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec
    from types import ModuleType

    from phalanx.tracking.series import Target

# phalanx.tracking.tensorboard.WRITER_MODULES (not imported here: that is what this file saves)
_WRITER_MODULES = ("torch.utils.tensorboard.writer", "tensorboardX.writer")


def _target() -> "Target | None":
    """The process's task, found at its first point (not at interpreter start)."""
    from phalanx.tracking.task import current_target  # why: at the first point, not at every start

    return current_target()


class _FirstWriter:
    """On ``sys.meta_path`` until a SummaryWriter's module is imported; then turns capture on (the
    capture module's own finder takes its place) and hands that import to it."""

    def find_spec(
        self, fullname: str, path: object, target: "ModuleType | None" = None
    ) -> "ModuleSpec | None":
        if fullname not in _WRITER_MODULES:
            return None
        if self in sys.meta_path:  # not yet taken off by another import
            sys.meta_path.remove(self)
        try:  # here, not at the top: a missing phalanx must not fail the script
            from phalanx.tracking import series, tensorboard  # why: at the first writer, not every start

            series.use(_target)
            tensorboard.capture()
            finder = tensorboard.finder()
        except Exception as exc:  # phalanx not importable in this interpreter: say so, run anyway
            sys.stderr.write(f"phalanx: TensorBoard capture is off in this process: {exc}\n")
            return None
        return None if finder is None else finder.find_spec(fullname, path, target)  # type: ignore[arg-type]


def _run_hidden(here: str) -> None:
    """Runs the sitecustomize that would have run without this folder on the path."""
    for entry in sys.path:
        if not entry or os.path.abspath(entry) == here:
            continue
        candidate = os.path.join(entry, "sitecustomize.py")
        if os.path.isfile(candidate):
            import importlib.util  # why: only where another sitecustomize is hidden by this one

            spec = importlib.util.spec_from_file_location("_phalanx_hidden_sitecustomize", candidate)
            if spec is not None and spec.loader is not None:
                spec.loader.exec_module(importlib.util.module_from_spec(spec))
            return


def _boot() -> None:
    if os.environ.get("PHALANX_CAPTURE_TENSORBOARD") == "1":
        sys.meta_path.insert(0, _FirstWriter())
    _run_hidden(os.path.dirname(os.path.abspath(__file__)))


_boot()
