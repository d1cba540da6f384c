"""What a plain script ran (``Task.init`` outside `phalanx run`), recorded as `phalanx run` records
it for its experiments (phalanx.repro): the git commit, branch and uncommitted diff, the packages of
this interpreter, Python's and Phalanx's versions, the host, and a size-capped snapshot of the
script's folder. ClearML records this for every ``Task.init``; a team comparing two plain runs
with `phalanx diff` needs it as much as for launched ones.

It runs in a daemon thread, so the script never waits for git or the package list; the script's
exit waits for it (bounded by ``WAIT_AT_EXIT``; not when it is stopped: SIGTERM must end it within
its grace) so a short script still gets its record. The record
travels as one ``repro`` event whose file is the snapshot, through the same spool as every other
report (locally ingested, or shipped to a server). ``PHALANX_RECORD_SOURCE=0`` turns it off.
Standard library only.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from phalanx.machine.procs import own_output_files

if TYPE_CHECKING:
    from phalanx.tracking.client import Reporter

log = logging.getLogger(__name__)

ENV_SWITCH = "PHALANX_RECORD_SOURCE"
WAIT_AT_EXIT = 20.0  # seconds a script's exit waits for the record at most


def enabled() -> bool:
    return os.environ.get(ENV_SWITCH, "1").strip().lower() not in ("0", "false", "no", "off")


def script_folder() -> str:
    """The folder of the script being run (``python path/train.py``), else the current folder
    (``python -c``, a notebook, an interactive session)."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if path and Path(path).is_file():
        return str(Path(path).resolve().parent)
    return os.getcwd()


def start(reporter: Reporter, cache: Path | None = None) -> threading.Thread:
    """Collect and report what runs, in a daemon thread (returned: the exit joins it). ``cache``:
    the home's cache folder, where this interpreter's package list is kept between runs."""
    folder = script_folder()
    argv = [sys.executable, *sys.argv]
    started_ns = time.time_ns()  # what the script writes from now on is output, not code
    own_output = own_output_files()  # `python train.py > out.log`, read before the console pipes

    def work() -> None:
        from phalanx import repro  # why: `from phalanx import Task` stays light (tarfile, ...)

        try:
            record, data = repro.collect(
                workdir=folder,
                python=sys.executable,
                launch={},
                cache=cache,
                since_ns=started_ns,
                own_output=own_output,
            )
            record.pop("launch", None)  # nothing to relaunch: a plain script has no experiment file
            record["script"] = {"command": argv, "folder": folder}
            rel, target = reporter.file_slot("source.tar.gz")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            reporter.event(
                "repro",
                {"name": "source", "path": repro.SNAPSHOT_PATH, "record": record, "spool_path": rel},
            )
        except Exception:  # recording what ran must never break the script
            log.warning("phalanx: recording what this script runs failed", exc_info=True)

    thread = threading.Thread(target=work, name="phalanx-whatran", daemon=True)
    thread.start()
    return thread
