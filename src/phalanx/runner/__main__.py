"""`python -m phalanx.runner RUN_DIR`: a detached experiment's supervisor.

It supervises the launch the Runner wrote into RUN_DIR (the validated spec and its typed options),
its output going to the log the Runner opened for it. Exit status as for `phalanx run`: 0
succeeded, 1 failed, 130 stopped, 2 a request that cannot run (its message starts `error: `).
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    import faulthandler
    import signal

    from phalanx.config import Settings
    from phalanx.errors import PhalanxError, SpecError, exit_status
    from phalanx.runner.observers import PlainObserver
    from phalanx.runner.options import read_launch
    from phalanx.runner.running import Runner

    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1 PID`: where is it stuck?
    if len(argv) != 1:
        sys.stderr.write("usage: python -m phalanx.runner RUN_DIR\n")
        return 2
    launch = read_launch(Path(argv[0]))
    if launch.headline:
        sys.stderr.write(f"phalanx: {launch.headline}\n")
    try:
        outcome = Runner(Settings()).run(
            launch.spec, launch.options, PlainObserver(sys.stdout), owns_run_dir=launch.remove_run_dir
        )
    except PhalanxError as exc:
        text = str(exc)  # as `phalanx` prints it: a file's problems one located line each
        located = isinstance(exc, SpecError) and "\n" in text
        sys.stderr.write(f"{text}\n" if located or text.startswith("error:") else f"error: {text}\n")
        return exit_status(exc)
    except KeyboardInterrupt:
        sys.stderr.write("phalanx: interrupted\n")
        return 130
    tail = f": {outcome.reason}" if outcome.reason else ""
    sys.stderr.write(f"phalanx: experiment {outcome.experiment_id} {outcome.status}{tail}\n")
    return outcome.exit_code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
