"""One way to launch an experiment, shared by `phalanx run`, `phalanx rerun`, `phalanx resume`,
``Experiment.submit`` and a group's trials (TorchX's ``Runner`` is the model).

``Runner(settings)``:
  ``dry_run(spec, options) -> Prepared``: what would start (plan, engine, dry run); nothing written.
  ``run(spec_or_prepared, options, observer) -> Outcome``: supervise it here, to its end.
  ``start(spec, options, log=...) -> Popen``: the supervisor in its own session, not waited for.
  ``fork(spec, options, log=...)``: the same, forked from this process (a group's trials: no
  Python start-up); ``start`` where a fork is unsafe (other threads run).
  ``submit(spec, options) -> Submitted``: ``start`` (or ``fork``: `phalanx run --detach`), then
  return once the experiment exists.
  ``status``, ``wait``, ``stop``, ``logs``: what a caller holding an id asks next.

A detached experiment is started from the validated spec object itself: it is written with its
typed ``LaunchOptions`` into the run folder (``launch.pickle``) and ``python -m phalanx.runner
RUN_DIR`` supervises it (or a process forked from the caller, which has it in memory already).
There is no second parse of the file and no second CLI start-up.
"""

from __future__ import annotations

from phalanx.runner.options import LaunchOptions, LaunchRecord
from phalanx.runner.running import Runner, StartFailed, StartTimeout, Submitted

__all__ = ["LaunchOptions", "LaunchRecord", "Runner", "StartFailed", "StartTimeout", "Submitted"]
