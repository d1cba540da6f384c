"""The supervisor: drives one experiment's Plan through a Backend until it is done.

It is the only writer of experiment and replica status (invariant 3). It works from the Backend
protocol alone (dry_run, submit, describe, logs, cancel), so the local engine, Slurm and Kubernetes
are supervised the same way: it tails every replica's log into the spool (LOG events, so the store
and the UI see the console) and to an observer (the terminal), runs an Ingester while the experiment
runs, stops every replica as soon as one fails (fail fast, with a reason naming the replica, its exit
code or signal and its last lines), restarts the whole group up to ``max_restarts`` times (as
torchrun does), stops the TensorFlow servers that never exit once the chief has succeeded, and
answers Ctrl-C, SIGTERM, `phalanx stop` and the server's stop request (``runs/<id>/stop``) by
stopping everything and marking the experiment stopped.

Public API (used by ``phalanx.runner.Runner``, the one launch path, and the engines' tests):
  ``prepare(spec_or_plan, ...) -> Prepared``: plan, engine, context and dry run; writes nothing.
  ``Supervisor(prepared, store, settings, observer).run() -> Outcome``: supervise to the end.
  ``record_building(prepared, store, accepted=...)``: the experiment recorded (or, accepted by the
  server, updated) before its environment is built.
To launch an experiment, use ``Runner.run`` / ``Runner.submit`` (``Runner.run`` takes a ``Prepared``
too: an engine instance of the caller's, as the engines' tests use). The thread that calls ``run()``
must live as long as the experiment: the local engine asks the kernel to stop replicas when the
thread that started them ends (PR_SET_PDEATHSIG).
"""

from phalanx.supervisor.outcome import EXIT_CODES, LoggingObserver, Observer, Outcome
from phalanx.supervisor.preparing import (
    Prepared,
    dry_run_json,
    interpreter,
    prepare,
    render_dry_run,
    replace_plan,
    tracking_env,
)
from phalanx.supervisor.recording import record_building
from phalanx.supervisor.stopping import stop_experiment, supervisor_pid
from phalanx.supervisor.supervising import Supervisor

__all__ = [
    "EXIT_CODES",
    "LoggingObserver",
    "Observer",
    "Outcome",
    "Prepared",
    "Supervisor",
    "dry_run_json",
    "interpreter",
    "prepare",
    "record_building",
    "render_dry_run",
    "replace_plan",
    "stop_experiment",
    "supervisor_pid",
    "tracking_env",
]
