"""Whether a CLI read must run its upkeep pass, decided without opening the full store.

Every read command first runs an upkeep pass (``open_for_reading``, below): it removes what a
killed `phalanx run` left of an experiment never recorded, ingests pending spool files, marks failed an
experiment whose supervisor or script died, and marks stopped a queued one whose `phalanx run` was
killed. Each needs the full store (SQLAlchemy: 0.3-0.4 CPU-s to import). Most of the time none has
anything to do, and ``upkeep_due`` tells so from a ``LiteReader``, the file system and /proc, with the
very tests those steps apply; then `phalanx ls` reads through the reader alone (docs/cli-speed.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from phalanx.config import Settings
    from phalanx.store.base import LocalStore
    from phalanx.store.lite import LiteReader


def open_lean(settings: Settings) -> LiteReader | None:
    """A reader of the store when it is an up-to-date SQLite file and no upkeep is due; None when
    the caller must take the full path (``open_for_reading``). Raises nothing of its own."""
    from phalanx.store.lite import LiteReader  # why: `phalanx --help` imports this module
    from phalanx.store.migrations import HEAD  # why: `phalanx --help` imports this module

    reader = LiteReader.open(settings.database_url, HEAD, settings.artifacts_root)
    if reader is None:
        return None
    try:
        due = upkeep_due(reader, settings)
    except Exception:  # anything unexpected: the full path decides (and reports) it
        due = "the lean check failed"
    if due is not None:
        reader.close()
        return None
    return reader


def upkeep_due(reader: LiteReader, settings: Settings) -> str | None:
    """What the upkeep pass would do (a short reason), or None when it would do nothing."""
    return _aborted_start(reader, settings) or _spool_due(reader, settings) or _orphan(reader, settings)


def _aborted_start(reader: LiteReader, settings: Settings) -> str | None:
    """``reconcile.clean_aborted_starts``'s test: a dead supervisor's folder with no experiment."""
    from phalanx.machine.procs import recorded_but_gone  # why: `phalanx --help` imports this module

    runs = settings.runs_dir
    if not runs.is_dir():
        return None
    for pid_file in runs.glob("*/supervisor.pid"):
        if recorded_but_gone(pid_file) is not None and not reader.has_experiment(pid_file.parent.name):
            return f"{pid_file.parent.name}: a killed `phalanx run` left its folder"
    return None


def _spool_due(reader: LiteReader, settings: Settings) -> str | None:
    """``Ingester.run_once``'s work: a spool file with bytes not yet ingested, or a finished one it
    would remove (its writer has exited), in a folder no live ingester follows. An experiment's
    folder ``spool/<id>`` whose ingester (its supervisor's, a plain script's ``--follow-pid``) runs,
    as ``runs/<id>/ingester.pid`` tells, is left to it: a file of a live writer is always ahead of
    the store by a fraction of a second, and ingesting it here would cost every read while anything
    reports the full store. Once that ingester is gone (killed, or ended before the file), the
    folder is abandoned and due again: the next read ingests it, so nothing reported is lost."""
    spool = settings.spool_dir
    if not spool.is_dir():
        return None
    from phalanx.spool import spool_files  # why: `phalanx --help` imports this module

    files = spool_files(spool)
    if not files:
        return None
    from phalanx.machine.procs import writer_gone  # why: `phalanx --help` imports this module

    offsets = reader.ingest_offsets()
    followed: dict[Path, bool] = {}
    for path in files:
        folder = path.parent
        if folder not in followed:
            followed[folder] = folder != spool and _followed(settings, folder.name)
        if followed[folder]:
            continue
        if path.stat().st_size > offsets.get(path.stem, 0) or writer_gone(path.stem):
            return f"{path}: to ingest or remove"
    return None


def _followed(settings: Settings, experiment_id: str) -> bool:
    """Whether a live ingester follows ``spool/<experiment_id>`` (``ingest.following``)."""
    from phalanx.machine.procs import INGESTER_RECORD, recorded_process  # why: `phalanx --help`

    return recorded_process(settings.runs_dir / experiment_id / INGESTER_RECORD) is not None


def _orphan(reader: LiteReader, settings: Settings) -> str | None:
    """``reconcile.reconcile``'s own rule (``pending_ends``): an unfinished experiment whose
    supervisor or script is gone, a queued one whose `phalanx run` was killed."""
    from phalanx.ends import pending_ends  # why: `phalanx --help` imports this module

    for exp, _ in pending_ends(reader, settings):  # an error: the lean check failed, the full path decides
        return f"{exp.id}: its recorder is gone"
    return None


def open_for_reading(settings: Settings | None = None) -> tuple[LocalStore, Settings]:
    """The store, after the upkeep pass: what a killed start left is removed, pending spool files
    are ingested, and the experiments whose supervisor or script died get their end. Every read
    (the CLI's, ``phalanx.search_experiments``, ``metrics_frame``) opens the store this way."""
    import logging  # why: `phalanx --help` imports this module

    from phalanx.config import Settings  # why: `phalanx --help` imports this module
    from phalanx.ingest import Ingester  # why: `phalanx ls`'s lean path needs no ingester
    from phalanx.store import open_store  # why: `phalanx --help` imports this module

    settings = settings or Settings()
    store = open_store(settings)
    try:  # before ingesting: a killed start-up leaves nothing, not rows of an experiment never shown
        from phalanx.reconcile import clean_aborted_starts  # why: `phalanx --help` imports this module

        clean_aborted_starts(store, settings)
    except Exception as exc:
        logging.getLogger(__name__).warning("checking aborted starts failed: %s", exc)
    try:
        Ingester(store, store.artifact_store, settings.spool_dir).run_once()
    except Exception as exc:  # reading must work even when a spool cannot be ingested right now
        logging.getLogger(__name__).warning("ingesting pending spool files failed: %s", exc)
    try:  # an experiment whose supervisor or script was killed (running or queued) gets its end here
        from phalanx.reconcile import reconcile  # why: `phalanx --help` imports this module

        reconcile(store, settings)
    except Exception as exc:
        logging.getLogger(__name__).warning("checking unfinished experiments failed: %s", exc)
    return store, settings
