"""Figures for docs/reliability.md: with DURABILITY_FIGURES=FILE, each fault test appends one JSON line
(what it measured) to FILE. Without it nothing is written."""

from __future__ import annotations

import json
import os
from typing import Any


def figure(fault: str, **values: Any) -> None:
    target = os.environ.get("DURABILITY_FIGURES")
    if target:
        with open(target, "a") as fh:
            fh.write(json.dumps({"fault": fault, **values}) + "\n")
