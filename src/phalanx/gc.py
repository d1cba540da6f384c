"""Garbage collection of what experiments leave on disk: `phalanx gc`, and ``collect`` for a
server's periodic sweep.

After one ingest pass (so nothing that reached a spool is lost), it removes
* run folders (``runs/<id>``) of experiments the store does not hold, once no supervisor runs for
  them and they are older than ``min_age`` (a `--detach` run creates its folder a moment before
  the experiment);
* spool folders (``spool/<id>``) of experiments the store does not hold, once every writer of them
  has exited (deleted experiments, scripts killed before their first record was ingested);
* spool files of finished experiments that are fully ingested and whose writers have exited (a
  supervisor that died before tidying up, a stream no ingester saw close), and empty spool folders;
* on a server, uploaded code bundles (``server/bundles/<sha256>.tar.gz``) that no experiment the
  store holds ran, older than ``min_age`` and not reserved by a submit in that time, and the
  working folders (``server/work/<id>``) they were unpacked into for experiments no longer held,
  and those experiments' box folders (``boxes/<id>``);
removes download-cache entries (``phalanx.data.cache``) unused for 7 days; then compacts the store
(``Store.compact``: VACUUM, and a WAL checkpoint on SQLite), giving back
the pages `phalanx delete` freed.
"""

from __future__ import annotations

import logging
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from phalanx.config import Settings
from phalanx.data.cache import collect as collect_cache
from phalanx.errors import NotFound
from phalanx.ingest import Ingester
from phalanx.machine.procs import writer_gone
from phalanx.spool import ACK_SUFFIX, SUFFIX, unshipped
from phalanx.store.lite import sqlite_path
from phalanx.supervisor.stopping import supervisor_pid

if TYPE_CHECKING:
    from phalanx.store.base import LocalStore, Store

log = logging.getLogger(__name__)

MIN_AGE_SECONDS = 600.0


@dataclass
class Collected:
    run_folders: list[str] = field(default_factory=list)
    spool_folders: list[str] = field(default_factory=list)
    spool_files: list[str] = field(default_factory=list)
    data_cache: list[str] = field(default_factory=list)  # download-cache entries unused for 7 days
    bundles: list[str] = field(default_factory=list)  # sha256 of uploaded code bundles removed
    work_folders: list[str] = field(default_factory=list)  # server/work/<id> of experiments not held
    bytes_freed: int = 0
    store_bytes_before: int | None = None
    store_bytes_after: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "run_folders": self.run_folders,
            "spool_folders": self.spool_folders,
            "spool_files": self.spool_files,
            "data_cache": self.data_cache,
            "bundles": self.bundles,
            "work_folders": self.work_folders,
            "bytes_freed": self.bytes_freed,
            "store_bytes_before": self.store_bytes_before,
            "store_bytes_after": self.store_bytes_after,
        }


def collect(
    store: LocalStore, settings: Settings, *, min_age: float = MIN_AGE_SECONDS, vacuum: bool = True
) -> Collected:
    """Remove what no experiment needs any more and compact the store (see the module docstring)."""
    out = Collected()
    try:
        Ingester(store, store.artifact_store, settings.spool_dir).run_once()
    except Exception:  # a spool that cannot be ingested now is kept: it is not garbage
        log.exception("gc: ingest pass failed; spools are kept")
        return out
    now = time.time()
    runs = settings.runs_dir
    for folder in sorted(runs.iterdir()) if runs.is_dir() else []:
        if not folder.is_dir() or _exists(store, folder.name) or supervisor_pid(settings, folder.name):
            continue
        if now - _newest(folder) < min_age:
            continue
        out.bytes_freed += _size(folder)
        shutil.rmtree(folder, ignore_errors=True)
        out.run_folders.append(folder.name)
    spool = settings.spool_dir
    for folder in sorted(spool.iterdir()) if spool.is_dir() else []:
        if not folder.is_dir():
            continue
        streams = list(folder.glob(f"*{SUFFIX}"))
        exists = _exists(store, folder.name)
        if not exists:
            # a server's experiment: its streams' records wait for `phalanx sync` until shipped
            live = [s for s in streams if not _finished_writer(s.stem, settings, folder.name) or unshipped(s)]
            if not live and now - _newest(folder) >= min_age:
                out.bytes_freed += _size(folder)
                shutil.rmtree(folder, ignore_errors=True)
                out.spool_folders.append(folder.name)
            continue
        for path in streams:
            if not _finished_writer(path.stem, settings, folder.name):
                continue
            if store.ingest_position(path.stem)[0] < path.stat().st_size:
                continue  # not all of it is in the store (a partial last line stays too)
            out.bytes_freed += path.stat().st_size
            for leftover in (path, path.with_suffix(ACK_SUFFIX)):
                leftover.unlink(missing_ok=True)
            shutil.rmtree(folder / "files" / path.stem, ignore_errors=True)
            out.spool_files.append(f"{folder.name}/{path.name}")
        if not any(folder.glob(f"*{SUFFIX}")) and not supervisor_pid(settings, folder.name):
            for name in ("ingest.log", "files"):
                target = folder / name
                shutil.rmtree(target, ignore_errors=True) if target.is_dir() else target.unlink(
                    missing_ok=True
                )
            try:
                folder.rmdir()
                out.spool_folders.append(folder.name)
            except OSError:
                pass  # something else lives there: keep it
    _collect_uploads(store, settings, out, now, min_age)

    out.data_cache = collect_cache(settings.home)
    if vacuum:
        out.store_bytes_before = _store_bytes(settings)
        store.compact()
        out.store_bytes_after = _store_bytes(settings)
    return out


def _collect_uploads(
    store: LocalStore, settings: Settings, out: Collected, now: float, min_age: float
) -> None:
    """Code bundles no held experiment ran, and working folders of experiments no longer held."""
    server = settings.home / "server"
    work = server / "work"
    boxes = settings.home / "boxes"  # a boxed experiment's own folders (machine.box.box_folder)
    folders = [f for root in (work, boxes) if root.is_dir() for f in sorted(root.iterdir())]
    for folder in folders:
        if not folder.is_dir() or _exists(store, folder.name) or supervisor_pid(settings, folder.name):
            continue
        if now - _newest(folder) < min_age:
            continue  # a submit unpacks it before its supervisor records the experiment
        out.bytes_freed += _size(folder)
        shutil.rmtree(folder, ignore_errors=True)
        out.work_folders.append(folder.name)
    bundles = server / "bundles"
    if not bundles.is_dir():
        return
    try:
        used = store.bundles_in_use(now - min_age)
    except Exception:  # the store cannot say: every bundle might be needed
        log.exception("gc: cannot read the submissions; code bundles are kept")
        return
    for path in sorted(bundles.glob("*.tar.gz")):
        sha = path.name.removesuffix(".tar.gz")
        try:
            if sha in used or now - path.stat().st_mtime < min_age:
                continue  # a bundle is kept before its submission is recorded
            size = path.stat().st_size
            path.unlink()
        except FileNotFoundError:
            continue
        out.bytes_freed += size
        out.bundles.append(sha)


def _finished_writer(stream: str, settings: Settings, experiment_id: str) -> bool:
    """Whether the process writing ``stream`` has exited. A supervisor's console stream ends with
    its supervisor; a stream named otherwise by another host cannot be told, so it is kept."""
    if stream.startswith("console-"):
        return supervisor_pid(settings, experiment_id) is None
    return writer_gone(stream)


def _exists(store: Store, experiment_id: str) -> bool:
    try:
        return bool(store.get_experiment(experiment_id).id == experiment_id)
    except NotFound:
        return False
    except Exception:  # an ambiguous prefix, a store hiccup: keep what might belong to something
        return True


def _newest(folder: Path) -> float:
    newest = folder.stat().st_mtime
    for path in folder.rglob("*"):
        try:
            newest = max(newest, path.lstat().st_mtime)
        except OSError:
            continue
    return newest


def _size(folder: Path) -> int:
    total = 0
    for path in folder.rglob("*"):
        try:
            if path.is_file() and not path.is_symlink():
                total += path.stat().st_size
        except OSError:
            continue
    return total


def _store_bytes(settings: Settings) -> int | None:
    """The SQLite database's size on disk (with its WAL); None for a database server."""
    db = sqlite_path(settings.database_url)
    if db is None:
        return None
    return sum(p.stat().st_size for p in (db, db.with_name(db.name + "-wal")) if p.exists()) or None
