"""The local engine: each replica is a process group on this machine, led by a small reaper.

Kept light on purpose: the reaper (``phalanx.backends.local.reaper``, started as ``python -I`` where
it is not forked from its supervisor) imports this package and must start fast; the engine lives
in ``engine.py`` (``from phalanx.backends.local.engine import LocalBackend``).
"""
