"""What a supervisor records, written into an up-to-date SQLite store through the standard
library's ``sqlite3``: no SQLAlchemy, no Alembic (issue 42: importing them was about 0.2 of the
0.5-0.6 CPU-s a whole submission of a trivial job cost, docs/cli-speed.md).

``LiteWriter`` is the supervisor's store (``store.run_store.RunStore``) where ``LiteWriter.open`` finds a
SQLite file at the newest schema revision; anywhere else (PostgreSQL, no file yet, an older schema
that opening the full store migrates) the supervisor opens the full store as before. Its rows are
those the full store writes: the statements a batch of events shares with the full store
(``store.event_writes``: keys, console lines, points and their summary, parameters, positions) are
the very same code; an experiment's, its replicas' and its attempts' rows are a handful of
statements of their own here, compared with the full store's in
tests/unit/store/test_lite_writer.py. What it does not write itself it hands to the full store,
opened then (``full``): a batch with other kinds of events (artifacts, models, texts, a later
attempt's points, a plain script's own experiment, status or record of what ran), an end or a
notice that a project's alert hooks are told about, a resume, a deletion.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from phalanx import knobs
from phalanx.domain import Event, Experiment, ExperimentStatus, Replica, ReplicaState, Series
from phalanx.errors import Conflict, NotFound, PhalanxError, UsageError
from phalanx.ids import new_id
from phalanx.store.batch import collect
from phalanx.store.db import Db, SqliteDb, driver_error
from phalanx.store.event_writes import (
    append_scalars,
    ingest,
    insert_logs,
    insert_params,
    position,
    prepare_points,
    series_ids,
)
from phalanx.store.lite import BUSY_TIMEOUT_S, LiteReader, sqlite_path
from phalanx.store.notice_kinds import NOTICES, STALLED
from phalanx.store.private_file import tighten
from phalanx.store.row_values import check_labels, experiment_changes, replica_changes, replica_values

if TYPE_CHECKING:
    from phalanx.store.artifacts import ArtifactStore
    from phalanx.store.base import ArtifactRecord
    from phalanx.store.run_store import RunStore
    from phalanx.store.sql.store import SqlStore

_INSERT_EXPERIMENT = """INSERT INTO experiments (id, name, project, status, framework, backend, cluster, tags,
    topology, spec_text, plan, created_at, kind) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'training')"""
_INSERT_REPLICA = """INSERT INTO replicas (experiment_id, name, role, "index", rank, state, host, pid,
    exit_code, reason, resources, started_at, finished_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"""
_HOOKED = """SELECT 1 FROM alert_hooks WHERE project = (SELECT project FROM experiments WHERE id = ?)
    LIMIT 1"""


class LiteWriter:
    """A supervisor's store on an up-to-date SQLite file (see the module's docstring). One
    connection, its transactions taken one at a time (the supervisor writes from a few threads)."""

    server_url: str | None = None  # this machine's store

    def __init__(
        self, conn: sqlite3.Connection, full: Callable[[], RunStore], artifacts_root: str | None = None
    ) -> None:
        self._conn = conn
        self._db = SqliteDb(conn)
        self._reader = LiteReader(conn, artifacts_root)
        self._full = full
        self._lock = threading.Lock()

    @classmethod
    def open(
        cls, database_url: str, head: str, full: Callable[[], RunStore], artifacts_root: str | None = None
    ) -> LiteWriter | None:
        """A writer into the SQLite file ``database_url`` names when it is stamped with revision
        ``head``; None when the full store must be opened instead. ``full`` opens the full store
        (called at most once, for what this writer hands on). Raises only what opening the full
        store would raise for the same settings (a bad PHALANX_SQLITE_CACHE_KIB)."""
        path = sqlite_path(database_url)
        if path is None or not path.is_file():
            return None
        tighten(path)
        cache_kib = knobs.SQLITE_CACHE_KIB.value()  # as the full store's (a bad value is refused alike)
        try:
            conn = sqlite3.connect(
                f"file:{quote(str(path))}?mode=rw",
                uri=True,
                timeout=BUSY_TIMEOUT_S,
                isolation_level=None,  # BEGIN IMMEDIATE and COMMIT are ours (as the full store's)
                check_same_thread=False,
            )
        except sqlite3.Error:
            return None
        try:
            stamp = conn.execute("SELECT version_num FROM alembic_version").fetchall()
            # as the full store sets every connection up (store.sql.engine); the file is in WAL mode
            # already: the full store that created it switched it
            conn.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(
                f"PRAGMA cache_size=-{cache_kib}"
            )  # a batch of points fits: no spill mid-transaction
            conn.execute("PRAGMA foreign_keys=ON")
        except sqlite3.Error:
            stamp = []
        if stamp != [(head,)]:
            conn.close()
            return None
        return cls(conn, full, artifacts_root)

    @property
    def artifact_store(self) -> ArtifactStore | None:
        return self._reader.artifact_store

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    @contextlib.contextmanager
    def _held(self) -> Iterator[None]:
        """The connection, this thread's alone meanwhile; the driver's errors become Phalanx
        errors (as ``store.sql.errors`` makes the full store's)."""
        with self._lock:
            try:
                yield
            except PhalanxError:
                raise
            except Exception as exc:
                error = driver_error(exc)
                if error is None:
                    raise
                raise error from exc

    @contextlib.contextmanager
    def _writing(self) -> Iterator[Db]:
        """One write transaction, the database's write lock taken at its start."""
        with self._held():
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
                self._conn.commit()
            except BaseException:
                if self._conn.in_transaction:  # a failed COMMIT too: the write lock is let go
                    self._conn.rollback()
                raise

    # --- the experiment's rows ---------------------------------------------------------------

    def create_experiment(
        self,
        *,
        name: str,
        project: str,
        replicas: Sequence[Replica] = (),
        experiment_id: str | None = None,
        framework: str | None = None,
        backend: str | None = None,
        cluster: str | None = None,
        tags: Sequence[str] = (),
        topology: Mapping[str, int] | None = None,
        spec_text: str | None = None,
        plan: Mapping[str, Any] | None = None,
        status: ExperimentStatus = ExperimentStatus.CREATED,
        created_at: float | None = None,
    ) -> Experiment:
        """As ``Store.create_experiment``."""
        check_labels(name, project, tags)
        exp_id = experiment_id or new_id()
        now = time.time() if created_at is None else created_at
        try:
            with self._writing() as db:
                if db.fetch("SELECT 1 FROM experiments WHERE id = ?", (exp_id,)):
                    raise Conflict(f"experiment {exp_id} already exists")
                db.execute(
                    _INSERT_EXPERIMENT,
                    (
                        *(exp_id, name, project, ExperimentStatus(status).value, framework, backend, cluster),
                        *(json.dumps(list(tags)), json.dumps(dict(topology or {})), spec_text),
                        *(json.dumps(dict(plan or {})), now),
                    ),
                )
                db.executemany(_INSERT_REPLICA, [_replica_row(exp_id, r) for r in replicas])
        except Conflict as exc:
            raise Conflict(f"experiment {exp_id} already exists") from exc
        return self.get_experiment(exp_id)

    def get_experiment(self, experiment_id: str) -> Experiment:
        with self._held():
            return self._reader.get_experiment(experiment_id)

    def list_replicas(self, experiment_id: str) -> list[Replica]:
        with self._held():
            return self._reader.list_replicas(experiment_id)

    def metric_titles(self, experiment_id: str) -> dict[str, list[str]]:
        with self._held():
            return self._reader.metric_titles(experiment_id)

    def last_points(self, experiment_id: str, title: str, n: int) -> dict[str, Series]:
        with self._held():
            return self._reader.last_points(experiment_id, title, n)

    def series_replicas(self, experiment_id: str, title: str) -> dict[str, str]:
        with self._held():
            return self._reader.series_replicas(experiment_id, title)

    def update_experiment(
        self,
        experiment_id: str,
        *,
        status: ExperimentStatus | None = None,
        reason: str | None = None,
        started_at: float | None = None,
        finished_at: float | None = None,
        handle: str | None = None,
        cluster: str | None = None,
        plan: Mapping[str, Any] | None = None,
    ) -> Experiment:
        """As ``Store.update_experiment``; an end its project's alert hooks are told about is the
        full store's to write (it queues their deliveries in the same transaction)."""
        values = experiment_changes(
            status=status,
            reason=reason,
            started_at=started_at,
            finished_at=finished_at,
            handle=handle,
            cluster=cluster,
            plan=plan,
        )
        if "plan" in values:
            values["plan"] = json.dumps(values["plan"])
        ends = status is not None and ExperimentStatus(status).done
        with self._writing() as db:
            _must_exist(db, experiment_id)
            # checked in the write transaction (it holds the write lock: no hook is added meanwhile)
            hooked = ends and _hooked(db, experiment_id)
            if values and not hooked:
                sets = ", ".join(f"{k} = ?" for k in values)
                db.execute(f"UPDATE experiments SET {sets} WHERE id = ?", (*values.values(), experiment_id))
        if hooked:  # the full store queues the hooks' deliveries in the transaction that ends it
            return self._full().update_experiment(
                experiment_id,
                status=status,
                reason=reason,
                started_at=started_at,
                finished_at=finished_at,
                handle=handle,
                cluster=cluster,
                plan=plan,
            )
        return self.get_experiment(experiment_id)

    def update_replica(
        self,
        experiment_id: str,
        name: str,
        *,
        state: ReplicaState | None = None,
        host: str | None = None,
        pid: int | None = None,
        exit_code: int | None = None,
        reason: str | None = None,
        started_at: float | None = None,
        finished_at: float | None = None,
        fresh: bool = False,
    ) -> None:
        """As ``Store.update_replica``."""
        values = replica_changes(
            state=state,
            host=host,
            pid=pid,
            exit_code=exit_code,
            reason=reason,
            started_at=started_at,
            finished_at=finished_at,
            fresh=fresh,
        )
        with self._writing() as db:
            _must_exist(db, experiment_id)
            key = (experiment_id, name)
            if values:
                sets = ", ".join(f"{k} = ?" for k in values)
                found = db.execute(
                    f"UPDATE replicas SET {sets} WHERE experiment_id = ? AND name = ?",
                    (*values.values(), *key),
                )
            else:
                found = len(db.fetch("SELECT 1 FROM replicas WHERE experiment_id = ? AND name = ?", key))
            if not found:
                raise NotFound(f"experiment {experiment_id} has no replica {name!r}")

    # --- attempts and what ran ---------------------------------------------------------------

    def add_attempt(
        self,
        experiment_id: str,
        *,
        kind: str,
        checkpoint_step: int | None = None,
        started_at: float | None = None,
    ) -> int:
        """As ``Store.add_attempt``."""
        with self._writing() as db:
            _must_exist(db, experiment_id)
            last = db.fetch("SELECT max(number) FROM attempts WHERE experiment_id = ?", (experiment_id,))[0][
                0
            ]
            number = 0 if last is None else int(last) + 1
            db.execute(
                "INSERT INTO attempts (experiment_id, number, kind, status, checkpoint_step, started_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (
                    experiment_id,
                    number,
                    kind,
                    ExperimentStatus.RUNNING.value,
                    checkpoint_step,
                    started_at or time.time(),
                ),
            )
        return number

    def finish_attempt(
        self, experiment_id: str, number: int, *, status: ExperimentStatus, reason: str | None = None
    ) -> None:
        """As ``Store.finish_attempt``."""
        with self._writing() as db:
            _must_exist(db, experiment_id)
            db.execute(
                "UPDATE attempts SET status = ?, reason = ?, finished_at = ?"
                " WHERE experiment_id = ? AND number = ?",
                (ExperimentStatus(status).value, reason, time.time(), experiment_id, number),
            )

    def attempts(self, experiment_id: str) -> list[dict[str, Any]]:
        with self._held():
            return self._reader.attempts(experiment_id)

    def set_repro(self, experiment_id: str, repro: Mapping[str, Any]) -> None:
        with self._writing() as db:
            _must_exist(db, experiment_id)
            db.execute(
                "UPDATE experiments SET repro = ? WHERE id = ?", (json.dumps(dict(repro)), experiment_id)
            )

    def repro(self, experiment_id: str) -> dict[str, Any]:
        with self._held():
            return self._reader.repro(experiment_id)

    def artifacts(self, experiment_id: str) -> list[ArtifactRecord]:
        with self._held():
            return self._reader.artifacts(experiment_id)

    # --- what the replicas report ------------------------------------------------------------

    def ingest_position(self, stream: str) -> tuple[int, int]:
        with self._held():
            return position(self._db, stream) or (0, -1)

    def ingest_batch(
        self, stream: str, start: int, end: int, last_seq: int, events: Sequence[Event]
    ) -> int | None:
        """As ``IngestStore.ingest_batch``: console lines, parameters and points of no attempt are
        written here; a batch with anything else is the full store's."""
        batch = collect(events)  # malformed events are refused before anything is written
        if (
            batch.artifacts
            or batch.models
            or batch.texts
            or batch.experiments
            or batch.statuses
            or batch.repros
        ):
            return self._full().ingest_batch(stream, start, end, last_seq, events)
        if any(b.attempt is not None for b in batch.scalars):
            return self._full().ingest_batch(stream, start, end, last_seq, events)
        ready = prepare_points(batch.scalars)  # before the write lock is taken

        def write(fresh: list[Event]) -> None:
            # fresh: the events not stored before, in order; all of them, unless a batch is re-sent
            rows, points = (batch, ready) if len(fresh) == len(events) else (collect(fresh), None)
            if rows.scalars:
                ids = series_ids(db, {(b.experiment_id, t, s) for b in rows.scalars for t, s in b.keys})
                append_scalars(db, rows.scalars, ids, points)
            if rows.params:
                insert_params(db, rows.params)
            for (experiment_id, replica), lines in rows.logs.items():
                insert_logs(db, experiment_id, replica, lines)

        with self._writing() as db:
            return ingest(db, stream, (start, end), last_seq, events, write)

    # --- handed to the full store ------------------------------------------------------------

    def notice(self, experiment_id: str, kind: str, replica: str | None, text: str) -> None:
        """As ``IngestStore.notice``; where the project has alert hooks, the full store's (it
        queues their deliveries)."""
        if kind not in NOTICES:
            raise UsageError(f"notice {kind!r}: give one of {', '.join(NOTICES)}")
        with self._writing() as db:
            _must_exist(db, experiment_id)
            hooked = _hooked(db, experiment_id)  # as for an end (update_experiment)
            if kind == STALLED and not hooked:  # a stall's text is the experiment's reason while it lasts
                db.execute("UPDATE experiments SET reason = ? WHERE id = ?", (text, experiment_id))
        if hooked:
            self._full().notice(experiment_id, kind, replica, text)

    def reopen_experiment(self, experiment_id: str) -> Experiment:
        return self._full().reopen_experiment(experiment_id)

    def delete_experiment(self, experiment_id: str) -> None:
        self._full().delete_experiment(experiment_id)


def _hooked(db: Db, experiment_id: str) -> bool:
    """Whether the experiment's project has alert hooks (told about an end or a notice)."""
    return bool(db.fetch(_HOOKED, (experiment_id,)))


def _must_exist(db: Db, experiment_id: str) -> None:
    if not db.fetch("SELECT 1 FROM experiments WHERE id = ?", (experiment_id,)):
        raise NotFound(f"no experiment {experiment_id!r}")


def _replica_row(experiment_id: str, r: Replica) -> tuple[Any, ...]:
    """``_INSERT_REPLICA``'s values: the full store's row, its resources as SQLite's JSON text."""
    row = replica_values(experiment_id, r)
    row["resources"] = json.dumps(row["resources"])
    return tuple(row.values())


if TYPE_CHECKING:  # mypy checks here that both stores are what a supervisor records through

    def _implements(lite: LiteWriter, full: SqlStore) -> tuple[RunStore, RunStore]:
        return lite, full
