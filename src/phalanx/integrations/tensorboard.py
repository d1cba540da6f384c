"""TensorBoard capture: scalars a script writes through a ``SummaryWriter`` also go to its experiment.

``SummaryWriter.add_scalar`` and ``add_scalars`` (``torch.utils.tensorboard`` and ``tensorboardX``)
are wrapped: the original still writes its event file, then the value is reported with the same
tag and step into this process's own series (``master``, ``worker-0``, ``rank N``: one per rank,
as ``log_metrics``). Wrapping the call instead of reading event files back means no file watcher,
no protobuf parsing, and the rank of the process that made the call.

When it is on:

* ``Task.init()`` / ``Task.current_task()`` turn it on (``Task.init(capture_tensorboard=False)`` or
  ``PHALANX_CAPTURE_TENSORBOARD=0`` turn it off); a replica of ``phalanx run`` whose script calls
  the SDK is therefore captured by default;
* ``phalanx.integrations.tensorboard.capture()`` turns it on from code;
* every replica of `phalanx run` on this machine: the local engine puts the SDK's sitecustomize
  (``phalanx.tracking.boot.BOOT_DIR``) on its PYTHONPATH, so a script with no Phalanx call
  at all is captured, and the processes it starts (torchrun's, ``mp.spawn``'s) too;
* on other engines: run it as ``python -m phalanx.integrations.tensorboard train.py ARGS`` (the
  experiment file's ``run.cmd``), which does the same from the command line.

Nothing is imported here until the script imports TensorBoard's writer itself; standard library only.
"""

from __future__ import annotations

import os
import shlex
import sys

from phalanx.tracking import series
from phalanx.tracking import tensorboard as _capture
from phalanx.tracking.boot import BOOT_DIR, ENV_CAPTURE
from phalanx.tracking.identity import ENV_EXPERIMENT, Identity
from phalanx.tracking.tensorboard import WRITER_MODULES, enabled_by_env, stop

# the capture itself is part of the SDK (Task.init turns it on): its public names are here too
__all__ = ["BOOT_DIR", "ENV_CAPTURE", "WRITER_MODULES", "capture", "enabled_by_env", "main", "stop"]


def capture() -> None:
    """Capture every ``SummaryWriter``'s scalars from now on, in this process and (through the
    environment) in the Phalanx processes it starts. Idempotent; writers already imported are
    patched now, the others when they are imported. The process's Task is found at the first point,
    not now (a script's own ``Task.init`` or arguments come first)."""
    series.use(_current_target)
    _capture.capture()


def _current_target() -> series.Target | None:
    from phalanx.tracking.task import current_target  # why: task.py hooks argparse on import

    return current_target()


def main(argv: list[str] | None = None) -> None:
    """``python -m phalanx.integrations.tensorboard SCRIPT [ARGS]`` (or ``-m MODULE [ARGS]``): run
    the program with capture on in it and in every Python process it starts, with the same pid
    (the program replaces this process). Outside an experiment it says first, in one line on
    stderr, that nothing will be recorded, and runs the program all the same."""
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        sys.stderr.write(
            "usage: python -m phalanx.integrations.tensorboard SCRIPT [ARGS] | -m MODULE [ARGS]\n"
            "Runs the program with its SummaryWriter scalars captured into the Phalanx experiment.\n"
        )
        raise SystemExit(0 if args else 2)
    if Identity.from_env() is None:  # the program still runs: it may call Task.init() itself
        sys.stderr.write(outside_note(args) + "\n")
    env = dict(os.environ)
    env[ENV_CAPTURE] = "1"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(BOOT_DIR), env.get("PYTHONPATH", "")) if p)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *args], env)


def outside_note(args: list[str]) -> str:
    """The one line the capture runner says when no experiment is named in its environment: the
    program's scalars then go nowhere (unless it calls ``Task.init()``), which it used to keep quiet
    about."""
    return (
        f"phalanx: TensorBoard capture records nothing here: this does not run inside a Phalanx experiment"
        f" ({ENV_EXPERIMENT} is not set), and the scalars go nowhere unless the script calls Task.init();"
        " run it in one as the experiment file's command (`run.cmd: python -m"
        f" phalanx.integrations.tensorboard {shlex.join(args)}`, then `phalanx run -f FILE`)"
    )


if __name__ == "__main__":
    main()
