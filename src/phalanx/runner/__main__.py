"""`python -m phalanx.runner RUN_DIR`: a detached experiment's supervisor.

It supervises the launch the Runner wrote into RUN_DIR (the validated spec and its typed options),
its output going to the log the Runner opened for it. Exit status as for `phalanx run`: 0
succeeded, 1 failed, 130 stopped, 2 a request that cannot run (its message starts `error: `).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from phalanx.store.base import IngestStore


def main(argv: list[str], store: IngestStore | None = None) -> int:
    """``store``: an open store to use (a supervisor forked from a group's controller), else the
    settings' store is opened once the replicas are starting."""
    import faulthandler
    import signal

    from phalanx.config import Settings
    from phalanx.errors import PhalanxError, SpecError, exit_status
    from phalanx.runner.observers import PlainObserver
    from phalanx.runner.options import SpecFile, read_launch
    from phalanx.runner.running import Runner

    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1 PID`: where is it stuck?
    if len(argv) != 1:
        sys.stderr.write("usage: python -m phalanx.runner RUN_DIR\n")
        return 2
    run_dir = Path(argv[0])
    launch = read_launch(run_dir)
    if launch.headline:
        sys.stderr.write(f"phalanx: {launch.headline}\n")
    spec = launch.spec
    if isinstance(spec, SpecFile):  # `phalanx run --detach`: the file is validated here, first
        from phalanx.spec.loader import refusal_text

        source = spec
        try:
            spec = source.load()
        except SpecError as exc:  # nothing written yet; the waiting `phalanx run` prints this
            sys.stderr.write(refusal_text(exc, source.path) + "\n")
            if launch.remove_run_dir:
                import shutil

                shutil.rmtree(run_dir, ignore_errors=True)
            return exit_status(exc)
        for note in spec.notes:  # `phalanx run --detach` echoes these once the experiment exists
            sys.stderr.write(f"note: {note}\n")
        sys.stderr.flush()
    try:
        outcome = Runner(Settings()).run(
            spec,
            launch.options,
            PlainObserver(sys.stdout),
            owns_run_dir=launch.remove_run_dir,
            store=store,
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
