"""`run.stall_notice` and `run.hang_timeout`: the stall watchdog's two times, per experiment.

Seconds (0 turns one off); a key left out leaves that time to PHALANX_STALL_NOTICE /
PHALANX_HANG_TIMEOUT and their defaults (the supervisor's liveness check reads them; docs/experiment-file.md).
"""

from __future__ import annotations

from phalanx.spec.errors import Collector
from phalanx.spec.model import Stall
from phalanx.spec.yamltree import YMap, is_null

KEYS = {"stall_notice": "notice", "hang_timeout": "fail"}


def read_stall(c: Collector, root: YMap) -> Stall:
    """The run section's stall times; a negative or non-number value is a problem at its line."""
    run = root.get("run")
    if not isinstance(run, YMap):
        return Stall()
    times: dict[str, float | None] = {}
    for key, field in KEYS.items():
        node = run.get(key)
        if node is None or is_null(node):
            continue
        value = c.number(node, f"run.{key}", positive=False)
        if value is not None and value < 0:
            c.add(node, f"run.{key}", f"must be 0 (off) or more seconds, got {value:g}")
            value = None
        times[field] = value
    return Stall(**times)
