"""The local engine: each replica is a process group on this machine, led by a small reaper.

Kept light on purpose: the reaper (``python -m phalanx.backends.local.reaper``) imports this package
and must start fast; the engine lives in ``engine.py`` (``from phalanx.backends.local.engine import
LocalBackend``).
"""
