"""Put on PYTHONPATH by ``python -m phalanx.integrations.tensorboard``: turns TensorBoard capture on
at interpreter start (PHALANX_CAPTURE_TENSORBOARD=1), then runs the sitecustomize this one hides,
if there is one. Standard library only; never fails the interpreter's start."""

from __future__ import annotations

import importlib.util
import os
import sys


def _boot() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    if os.environ.get("PHALANX_CAPTURE_TENSORBOARD") == "1":
        try:
            from phalanx.integrations.tensorboard import capture  # why: never fail without phalanx

            capture()
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
