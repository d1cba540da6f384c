"""One way to launch an experiment, shared by `phalanx run`, `phalanx rerun`, `phalanx resume`,
``Experiment.submit`` and a group's trials (TorchX's ``Runner`` is the model).

``Runner(settings)``:
  ``dry_run(spec, options) -> Prepared``: what would start (plan, engine, dry run); nothing written.
  ``run(spec_or_prepared, options, observer) -> Outcome``: supervise it here, to its end.
  ``start(spec, options, log=...) -> Popen``: the supervisor in its own session, not waited for.
  ``fork(spec, options, log=...)``: the same, forked from this process (a group's trials: no
  Python start-up); ``start`` where a fork is unsafe (other threads run).
  ``submit(spec, options) -> Submitted``: ``start``, then return once the experiment exists.
  ``status``, ``wait``, ``stop``, ``logs``: what a caller holding an id asks next.

A detached experiment is started from the validated spec object itself: it is written with its
typed ``LaunchOptions`` into the run folder (``launch.pickle``) and ``python -m phalanx.runner
RUN_DIR`` supervises it. There is no second parse of the file and no second CLI start-up.
`phalanx run --detach` hands it a ``SpecFile`` instead: the supervisor, which imports the spec
model anyway, loads and validates the file once, first (its mistakes end it with status 2, which
``submit`` raises as StartFailed with the file's problems).
"""

from __future__ import annotations

from phalanx.runner.options import LaunchOptions, LaunchRecord, SpecFile
from phalanx.runner.running import Runner, StartFailed, StartTimeout, Submitted

__all__ = ["LaunchOptions", "LaunchRecord", "Runner", "SpecFile", "StartFailed", "StartTimeout", "Submitted"]
