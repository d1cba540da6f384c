"""Put on PYTHONPATH of every replica by the local engine (and by ``python -m
phalanx.integrations.tensorboard``): turns TensorBoard capture on at interpreter start when
PHALANX_CAPTURE_TENSORBOARD=1, so a script that writes a SummaryWriter and never calls Phalanx is
captured; then runs the sitecustomize this one hides, if there is one. Standard library only (it is
part of the SDK copy a foreign venv gets); never fails the interpreter's start."""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from phalanx.tracking.series import Target


def _target() -> Target | None:
    """The process's task, found at its first point (not at interpreter start)."""
    # imported at the first point: every Python process of a replica runs this file at its start
    from phalanx.tracking.task import (
        current_target,  # why: at the first point, not at every interpreter start
    )

    return current_target()


def _boot() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    if os.environ.get("PHALANX_CAPTURE_TENSORBOARD") == "1":
        try:  # here, not at the top: a missing phalanx must not fail the interpreter's start
            from phalanx.tracking import series, tensorboard  # why: a missing phalanx must not fail the start

            series.use(_target)
            tensorboard.capture()
        except Exception as exc:  # phalanx not importable in this interpreter: say so, run anyway
            sys.stderr.write(f"phalanx: TensorBoard capture is off in this process: {exc}\n")
    for entry in sys.path:  # the sitecustomize that would have run without this folder
        if not entry or os.path.abspath(entry) == here:
            continue
        candidate = os.path.join(entry, "sitecustomize.py")
        if os.path.isfile(candidate):
            spec = importlib.util.spec_from_file_location("_phalanx_hidden_sitecustomize", candidate)
            if spec is not None and spec.loader is not None:
                spec.loader.exec_module(importlib.util.module_from_spec(spec))
            return


_boot()
