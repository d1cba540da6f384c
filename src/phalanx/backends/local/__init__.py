"""The local engine: each replica is a process group on this machine, led by a small reaper.

Kept light on purpose: the reaper (``python -m phalanx.backends.local.reaper``) imports this package
and must start fast; the engine lives in ``engine.py``.
"""

from typing import Any


def __getattr__(name: str) -> Any:
    """`from phalanx.backends.local import LocalBackend` works, loaded on first use only."""
    if name == "LocalBackend":
        from phalanx.backends.local.engine import LocalBackend

        return LocalBackend
    raise AttributeError(name)
