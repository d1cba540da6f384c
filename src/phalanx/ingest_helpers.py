"""Ingesters that join a supervisor's when its replicas report faster than one can store (issue 42:
one ingester thread was the ceiling of what several replicas report; from 4 processes Phalanx
stored 0.9-1.0x what raw ``sqlite3`` ``executemany`` did).

While a supervisor's ingester finds more than ``START_BYTES`` waiting in two or more of its spool
files, it starts ``python -m phalanx.ingest --until-idle`` over the same folder, up to one process
per other core and one per other waiting file. Each takes the files no other ingester holds at that
moment (``spool.taking``: one ingester per file and batch). It ends once what waits in the folder
falls under ``STOP_BYTES``, or it found nothing to take for about a second (every waiting file
another's, a record still being written), or after a pass that failed (a full disk, a database
refusing writes: it says why in its log, and no helper is started again); a later flood starts new
ones. The store is what keeps each record once (its position compared-and-set); the lock spares
two ingesters the same batch. A batch's points are compressed and summarised before its
transaction (``store.event_writes.prepare_points``), so the ingesters share the cores and queue
for the database's one writer only for their SQL.

Only on a store in a SQLite file, which a helper writes through the standard library
(``store.lite_writer``): it starts in about 0.08 CPU-second. A helper is stopped before its
ingester's last pass, and killed when the thread that started it ends (PR_SET_PDEATHSIG through
``setpriv``, where there is one); a batch it had begun is rolled back by the database and taken by
that last pass, and an acknowledgement it had no time to write is written by the next ingester that
looks at its file. It runs Phalanx's code only: ``python -P``, its working folder the store's
home, never the supervisor's (a submitted bundle's, on a server). Standard library only.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

from phalanx import knobs
from phalanx.config import Settings, sqlite_url
from phalanx.machine.box import ended_with_parent
from phalanx.spool import can_lock
from phalanx.store.artifacts import local_path
from phalanx.store.lite import sqlite_path

log = logging.getLogger(__name__)

START_BYTES = 4 << 20  # spool bytes waiting (about 250,000 points) before a helper is worth its start
STOP_BYTES = 1 << 20  # a helper ends once less than this waits in its folder
IDLE_PASSES = 100  # ... or once its passes (0.01 s apart) found nothing to take this many times in a row
MOST = 3  # by default: the store's one writer takes a batch's SQL, a third of its cost, from all of them
CANNOT_HELP = 3  # a helper's exit status where its store is not an up-to-date SQLite file
HELPERS_LOG = "ingest-helpers.log"  # a run's helpers' words, in its run folder
_STOP_GRACE_S = 10.0


class Helpers:
    """The helper processes of one ingester over ``spool`` (see the module's docstring); what they
    say goes to ``log``."""

    def __init__(
        self,
        settings: Settings,
        spool: Path,
        log_path: Path,
        *,
        claimed: bool,
        most: int | None = None,
        start_bytes: int = START_BYTES,
    ) -> None:
        self.spool = spool
        self.log_path = log_path
        self.claimed = claimed
        self.start_bytes = start_bytes
        if most is None:  # PHALANX_INGEST_HELPERS, else one per other core this process may use
            given = knobs.INGEST_HELPERS.value()
            most = min(len(os.sched_getaffinity(0)) - 1, MOST) if given is None else given
        # helpers only where a file can be held for a batch (NFS without its lock daemon cannot:
        # each ingester would redo the others' batches) and the store is a SQLite file
        usable = sqlite_path(settings.database_url) is not None and can_lock(spool)
        self.most = most if usable else 0
        self._home = settings.home
        self._env = helper_env(settings)
        self._procs: list[subprocess.Popen[bytes]] = []

    def grow(self, waiting: int, files: int) -> None:
        """Start helpers while ``waiting`` bytes in ``files`` spool files call for more."""
        failed = [p.returncode for p in self._procs if p.poll() not in (None, 0)]
        if failed and self.most:  # could not help (no lean writer: CANNOT_HELP), or failed: none again
            log.warning(
                "ingest: a helper ended with status %s (see %s); ingesting alone", failed[0], self.log_path
            )
            self.most = 0
        self._procs = [p for p in self._procs if p.returncode is None]
        wanted = min(self.most, files - 1) if waiting >= self.start_bytes else 0
        while len(self._procs) < wanted:
            try:
                self._procs.append(self._start())
            except OSError as exc:  # no process to spare (EAGAIN, ENOMEM, no file left): alone
                log.warning("ingest: no helper could start (%s); ingesting alone", exc)
                self.most = 0
                return

    def stop(self) -> None:
        """End the helpers for good: their ingester is stopping, and its last pass takes what they
        leave (a batch one had begun is rolled back by the database)."""
        self.most = 0  # that last pass starts none
        for proc in self._procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self._procs:
            try:
                proc.wait(timeout=_STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._procs = []

    @property
    def running(self) -> int:
        return sum(p.poll() is None for p in self._procs)

    def _start(self) -> subprocess.Popen[bytes]:
        # -P: not the supervisor's working folder (a submitted bundle's, on a server) on the path, so
        # no module a job put there is imported into the server's account
        argv = [sys.executable, "-P", "-m", "phalanx.ingest", "--spool", str(self.spool), "--until-idle"]
        if self.claimed:
            argv.append("--claimed")
        argv = ended_with_parent(argv)  # with the thread that started it: the ingest thread
        with open(self.log_path, "ab") as out:
            return subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self._env,
                cwd=self._home,
                close_fds=True,
                start_new_session=True,  # a terminal's Ctrl-C or hang-up is the supervisor's to handle
            )


def helper_env(settings: Settings) -> dict[str, str]:
    """This process's environment with the store's settings (given as keywords, perhaps) spelled
    out as absolute paths (a helper works in the store's home, not in this process's folder, which
    a relative path would be read from), and this Phalanx first on the path."""
    env = dict(os.environ)
    env["PHALANX_HOME"] = str(settings.home.absolute())
    database = sqlite_path(settings.database_url)
    if database is None:
        env.pop("PHALANX_DB_URL", None)  # no helper is started for it
    else:
        env["PHALANX_DB_URL"] = sqlite_url(database.absolute())
    artifacts = settings.artifacts_root  # a local root as fsspec resolves it here (~, file://relative)
    env["PHALANX_ARTIFACTS_URL"] = local_path(artifacts) or artifacts
    package_root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
    return env
