"""nlp's job in a venv of its own (built in a box: pip runs the packages' code as the project's
account), reading its dataset where it lies (mode mount, read-only) and reporting through the SDK
copy a foreign venv gets."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import tabulate

from phalanx import Task

print(f"BUILT tabulate {tabulate.__version__} in {sys.prefix}", flush=True)
text = Path(os.environ["PHALANX_INPUT_TEXT"])
print(f"MOUNTED {text} {sorted(p.name for p in text.iterdir())}", flush=True)
try:
    (text / "scribble.txt").write_text("x")
except OSError as exc:
    print(f"INPUT READ-ONLY {exc.strerror}", flush=True)
lake = Path(os.environ["PHALANX_INPUT_LAKE"])
print(f"LAKE {sorted(p.name for p in lake.iterdir())}", flush=True)
Task.init().get_logger().report_scalar("rows", "builder", value=2.0, iteration=0)
