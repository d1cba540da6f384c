"""SqlStore: the Store protocol on SQLAlchemy 2 (SQLite by default, PostgreSQL via PHALANX_DB_URL).

The store owns its transactions: each public method is one transaction. Table rows stay in this
package; callers get the domain dataclasses of ``phalanx.domain`` and ``phalanx.store.base``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from operator import itemgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import Connection, String, cast, func, insert, or_, select, update
from sqlalchemy.exc import IntegrityError

from phalanx.domain import (
    Event,
    Experiment,
    ExperimentFilter,
    ExperimentStatus,
    Page,
    Replica,
    ReplicaState,
    Role,
    Series,
)
from phalanx.errors import Conflict, NotFound, StoreError, UsageError, not_resumable
from phalanx.ids import new_id
from phalanx.store import details
from phalanx.store.artifacts import ArtifactStore
from phalanx.store.base import (
    ArtifactRecord,
    GroupStore,
    IngestStore,
    SeriesView,
)
from phalanx.store.batch import Batch, collect
from phalanx.store.event_writes import ReadyPoints, ingest, new_events, position, prepare_points
from phalanx.store.row_values import check_labels, experiment_changes, replica_changes, replica_values
from phalanx.store.sql import alerts, deletion, scalars
from phalanx.store.sql import events as ev_sql
from phalanx.store.sql.driver import DriverDb
from phalanx.store.sql.engine import make_engine, upgrade, writer
from phalanx.store.sql.errors import clash, phalanx_errors
from phalanx.store.sql.groups import GroupBook
from phalanx.store.sql.lookup import experiment as _experiment
from phalanx.store.sql.lookup import like as _like
from phalanx.store.sql.lookup import replica as _replica
from phalanx.store.sql.lookup import resolve as _resolve
from phalanx.store.sql.many import ManyReads
from phalanx.store.sql.models import (
    EventKeyRow,
    ExperimentRow,
    ParamRow,
    ReplicaRow,
    SeriesRow,
)
from phalanx.store.sql.records import RecordReads
from phalanx.store.sql.starts import AttemptBook
from phalanx.store.sql.submissions import SubmissionBook
from phalanx.store.sql.table import column_values
from phalanx.tracking.labels import MAX_TAG, label_problem

_first, _second, _third = itemgetter(0), itemgetter(1), itemgetter(2)
_ORDER = {
    "created_at",
    "name",
    "project",
    "status",
    "started_at",
    "finished_at",
    "id",
    "framework",
    "group_id",
}
_RETRIES = 5
_T = TypeVar("_T")
# experiments are read without `repro` (a diff and a package list): store.repro() reads it alone
_EXP_COLUMNS = [c for c in ExperimentRow.c if c.key != "repro"]


@phalanx_errors
class SqlStore(AttemptBook, RecordReads, ManyReads, GroupBook, SubmissionBook):
    """The store (``base.IngestStore`` and ``base.GroupStore``; each method is documented there).
    ``url``: a SQLAlchemy URL (``sqlite:///path`` or ``postgresql+psycopg://...``); ``artifacts``:
    where files live (deleted with their experiment). The schema is migrated to the newest revision
    on open unless ``migrate`` is False. SQLAlchemy's errors never leave it (``errors.phalanx_errors``)."""

    artifact_store: ArtifactStore | None
    server_url: str | None = None  # a store on this machine (``base.Store.server_url``)

    def __init__(self, url: str, artifacts: ArtifactStore | None = None, *, migrate: bool = True) -> None:
        self.engine = make_engine(url)
        self._writer = writer(self.engine)
        self.artifact_store = artifacts
        if migrate:
            upgrade(self.engine)

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    def close(self) -> None:
        self.engine.dispose()

    def compact(self) -> None:
        # Both engines refuse VACUUM inside a transaction, and the SQLite engine begins one on every
        # connection, so it goes through the driver's own connection (its errors are translated too).
        raw = self.engine.raw_connection()
        try:
            driver: Any = raw.driver_connection
            if self.dialect == "sqlite":
                driver.isolation_level = None  # autocommit: no implicit BEGIN
                driver.execute("VACUUM")
                driver.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            else:
                raw.rollback()
                driver.autocommit = True  # psycopg: VACUUM needs autocommit
                try:
                    with driver.cursor() as cur:
                        cur.execute("VACUUM")
                finally:
                    driver.autocommit = False
        finally:
            raw.close()

    # --- experiments ------------------------------------------------------------------------

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
        check_labels(name, project, tags)
        exp_id = experiment_id or new_id()
        now = time.time() if created_at is None else created_at
        try:
            with self._writer.begin() as conn:
                if conn.execute(select(ExperimentRow.c.id).where(ExperimentRow.c.id == exp_id)).scalar():
                    raise Conflict(f"experiment {exp_id} already exists")
                conn.execute(
                    insert(ExperimentRow).values(
                        id=exp_id,
                        name=name,
                        project=project,
                        status=ExperimentStatus(status).value,
                        framework=framework,
                        backend=backend,
                        cluster=cluster,
                        tags=list(tags),
                        topology=dict(topology or {}),
                        spec_text=spec_text,
                        plan=dict(plan or {}),
                        reason=None,
                        created_at=now,
                        started_at=None,
                        finished_at=None,
                        handle=None,
                    )
                )
                if replicas:
                    conn.execute(insert(ReplicaRow), [replica_values(exp_id, r) for r in replicas])
        except IntegrityError as exc:
            raise Conflict(f"experiment {exp_id} already exists") from exc
        return self.get_experiment(exp_id)

    def resolve_id(self, experiment_id: str, projects: Sequence[str] | None = None) -> str:
        """The full id for an id or a unique prefix of one (among ``projects``' experiments when
        given). NotFound / UsageError (ambiguous)."""
        with self.engine.connect() as conn:
            return _resolve(conn, experiment_id, projects)

    def get_experiment(self, experiment_id: str) -> Experiment:
        with self.engine.connect() as conn:
            full = _resolve(conn, experiment_id)
            row = conn.execute(select(*_EXP_COLUMNS).where(ExperimentRow.c.id == full)).one()
            return _experiment(row._mapping)

    def list_experiments(self, query: ExperimentFilter | None = None) -> Page[Experiment]:
        q = query or ExperimentFilter()
        conds: list[Any] = []
        if q.status is not None:
            conds.append(ExperimentRow.c.status == ExperimentStatus(q.status).value)
        if q.project:
            conds.append(ExperimentRow.c.project == q.project)
        if q.group_id:
            conds.append(ExperimentRow.c.group_id == q.group_id)
        if q.projects is not None:
            conds.append(ExperimentRow.c.project.in_(q.projects))
        if q.ids is not None:
            conds.append(ExperimentRow.c.id.in_(q.ids))
        if q.tag:
            conds.append(cast(ExperimentRow.c.tags, String).like(f'%"{_like(q.tag)}"%', escape="\\"))
        if q.text:
            pattern = f"%{_like(q.text.lower())}%"
            conds.append(
                or_(
                    func.lower(ExperimentRow.c.id).like(pattern, escape="\\"),
                    func.lower(ExperimentRow.c.name).like(pattern, escape="\\"),
                    func.lower(ExperimentRow.c.project).like(pattern, escape="\\"),
                )
            )
        desc = q.order_by.startswith("-")
        column = q.order_by.lstrip("-+")
        if column not in _ORDER:
            raise UsageError(
                f"cannot order experiments by {column!r}; use one of {', '.join(sorted(_ORDER))}"
            )
        if q.limit < 0 or q.offset < 0:
            raise UsageError("offset and limit must not be negative")
        col = ExperimentRow.c[column]
        with self.engine.connect() as conn:
            total = conn.execute(select(func.count()).select_from(ExperimentRow).where(*conds)).scalar_one()
            rows = conn.execute(
                select(*_EXP_COLUMNS)
                .where(*conds)
                .order_by(col.desc() if desc else col.asc(), ExperimentRow.c.id)
                .offset(q.offset)
                .limit(q.limit)
            ).all()
        return Page(
            items=[_experiment(r._mapping) for r in rows], total=int(total), offset=q.offset, limit=q.limit
        )

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
        values = experiment_changes(
            status=status,
            reason=reason,
            started_at=started_at,
            finished_at=finished_at,
            handle=handle,
            cluster=cluster,
            plan=plan,
        )
        with self._writer.begin() as conn:
            full = _resolve(conn, experiment_id)
            ends, before = status is not None and ExperimentStatus(status).done, None
            if ends:  # an end is told to the project's hooks once, in this transaction
                before = conn.execute(  # locked (PostgreSQL; SQLite's writer holds the database)
                    select(ExperimentRow.c.status).where(ExperimentRow.c.id == full).with_for_update()
                ).scalar()
            if values:
                conn.execute(update(ExperimentRow).where(ExperimentRow.c.id == full).values(**values))
            if ends:
                alerts.record_end(conn, full, before, values["status"])
        return self.get_experiment(full)

    def notice(self, experiment_id: str, kind: str, replica: str | None, text: str) -> None:
        with self._writer.begin() as conn:
            alerts.notice(conn, _resolve(conn, experiment_id), kind, replica, text)

    def reopen_experiment(self, experiment_id: str) -> Experiment:
        """A failed or stopped experiment starts again (`phalanx resume`): status starting, no
        reason or end; its replicas pending again. Conflict unless it is failed or stopped."""
        with self._writer.begin() as conn:
            full = _resolve(conn, experiment_id)
            status = conn.execute(
                select(ExperimentRow.c.status).where(ExperimentRow.c.id == full)
            ).scalar_one()
            if not ExperimentStatus(status).resumable:
                raise not_resumable(full, status)
            conn.execute(
                update(ExperimentRow)
                .where(ExperimentRow.c.id == full)
                .values(status=ExperimentStatus.STARTING.value, reason=None, finished_at=None)
            )
            conn.execute(
                update(ReplicaRow)
                .where(ReplicaRow.c.experiment_id == full)
                .values(
                    state=ReplicaState.PENDING.value, exit_code=None, reason=None, finished_at=None, pid=None
                )
            )
        return self.get_experiment(full)

    def set_repro(self, experiment_id: str, repro: Mapping[str, Any]) -> None:
        with self._writer.begin() as conn:
            full = _resolve(conn, experiment_id)
            conn.execute(update(ExperimentRow).where(ExperimentRow.c.id == full).values(repro=dict(repro)))

    def repro(self, experiment_id: str) -> dict[str, Any]:
        """What the experiment ran (phalanx.repro); {} when nothing was recorded."""
        with self.engine.connect() as conn:
            full = _resolve(conn, experiment_id)
            value = conn.execute(select(ExperimentRow.c.repro).where(ExperimentRow.c.id == full)).scalar()
        return dict(value or {})

    def run_details(self, experiment_id: str) -> dict[str, Any]:
        return details.run_details(self, experiment_id)

    def download_artifact(self, experiment_id: str, artifact: ArtifactRecord, directory: Path) -> Path:
        if self.artifact_store is None:
            raise StoreError("this store has no artifact store to download from")
        return self.artifact_store.download(experiment_id, artifact.path, directory)

    def delete_experiment(self, experiment_id: str) -> None:
        with self._writer.begin() as conn:
            full = _resolve(conn, experiment_id)
            deletion.delete_experiments(conn, [full])
        if self.artifact_store is not None:
            self.artifact_store.delete_experiment(full)

    # --- replicas ---------------------------------------------------------------------------

    def list_replicas(self, experiment_id: str) -> list[Replica]:
        with self.engine.connect() as conn:
            full = _resolve(conn, experiment_id)
            rows = conn.execute(select(ReplicaRow).where(ReplicaRow.c.experiment_id == full)).all()
        replicas = [_replica(r._mapping) for r in rows]
        order = {Role.MASTER: 0, Role.WORKER: 1, Role.PS: 2}
        return sorted(replicas, key=lambda r: (order.get(r.role, 3), r.index, r.name))

    def add_replicas(self, experiment_id: str, replicas: Sequence[Replica]) -> None:
        """Add replica rows to an existing experiment (Conflict if one exists)."""
        try:
            with self._writer.begin() as conn:
                full = _resolve(conn, experiment_id)
                conn.execute(insert(ReplicaRow), [replica_values(full, r) for r in replicas])
        except IntegrityError as exc:
            raise Conflict(f"a replica of {experiment_id} already exists: {exc.orig}") from exc

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
        with self._writer.begin() as conn:
            full = _resolve(conn, experiment_id)
            result = conn.execute(
                update(ReplicaRow)
                .where(ReplicaRow.c.experiment_id == full, ReplicaRow.c.name == name)
                .values(**values)
                if values
                else select(ReplicaRow.c.name).where(
                    ReplicaRow.c.experiment_id == full, ReplicaRow.c.name == name
                )
            )
            found = result.rowcount if values else len(result.all())
            if not found:
                raise NotFound(f"experiment {full} has no replica {name!r}")

    # --- events -----------------------------------------------------------------------------

    def write_events(self, events: Sequence[Event]) -> int:
        if not events:
            return 0
        removed: list[tuple[str, str]] = []
        n = self._retry(lambda conn: _write(conn, events, removed))
        self._remove_files(removed)
        return n

    def _remove_files(self, removed: Sequence[tuple[str, str]]) -> None:
        """Delete the files of checkpoints a retention policy dropped (their rows are gone). A
        crash before this leaves files no row names; nothing a user sees is wrong."""
        if (store := self.artifact_store) is None:
            return
        for experiment_id, path in removed:
            with contextlib.suppress(Exception):
                store.delete(experiment_id, path)

    def ingest_batch(
        self, stream: str, start: int, end: int, last_seq: int, events: Sequence[Event]
    ) -> int | None:
        """Write ``events`` read from spool file ``stream`` between byte offsets ``start`` and ``end``,
        and move the stored position to ``end``, in one transaction. Returns how many events were
        new, or None (nothing written) if the stored position is no longer ``start`` (another
        ingester got there first)."""

        try:  # rows and points made before the write lock is taken
            batch = collect(events)
            ready: tuple[Batch, ReadyPoints | None] | None = (batch, prepare_points(batch.scalars))
        except UsageError:  # said in the transaction, of its new events only (a stored batch: None)
            ready = None

        def work(conn: Connection) -> int | None:
            removed.clear()  # a retried transaction starts over
            return ingest(
                DriverDb(conn),
                stream,
                (start, end),
                last_seq,
                events,
                # all of them fresh, unless a batch is re-sent: then only those are collected
                lambda fresh: ev_sql.apply_events(
                    conn, fresh, removed, ready if ready is not None and len(fresh) == len(events) else None
                ),
            )

        removed: list[tuple[str, str]] = []
        result = self._retry(work)
        self._remove_files(removed)
        return result

    def ingest_position(self, stream: str) -> tuple[int, int]:
        """(byte offset, last seq) ingest has committed for a spool stream; (0, -1) if none."""
        with self.engine.connect() as conn:
            return position(DriverDb(conn), stream) or (0, -1)

    def _retry(self, work: Callable[[Connection], _T]) -> _T:
        """Run ``work(conn)`` in a write transaction, retrying on a write clash (PostgreSQL unique
        violations between concurrent ingesters, SQLite busy past its timeout)."""
        for attempt in range(_RETRIES):
            try:
                with self._writer.begin() as conn:
                    return work(conn)
            except Exception as exc:  # through SQLAlchemy, or the driver's own (store.db's statements)
                kind = clash(exc)
                if kind is None:
                    raise
                if attempt == _RETRIES - 1:
                    if kind == "OperationalError":
                        raise  # the database is down or stays locked: BackendUnavailable (errors.py)
                    raise StoreError(f"cannot write events: {getattr(exc, 'orig', exc)}") from exc
                time.sleep(0.05 * (attempt + 1))
        raise AssertionError("unreachable")

    # --- reads ------------------------------------------------------------------------------

    def metric_titles(self, experiment_id: str) -> dict[str, list[str]]:
        with self.engine.connect() as conn:
            return scalars.titles(conn, _resolve(conn, experiment_id))

    def series_replicas(self, experiment_id: str, title: str) -> dict[str, str]:
        with self.engine.connect() as conn:
            return scalars.replicas(conn, _resolve(conn, experiment_id), title)

    def last_points(self, experiment_id: str, title: str, n: int) -> dict[str, Series]:
        """series -> its last ``n`` points by step (the pace of each rank reads only the chunks
        that hold these, however long the run)."""
        with self.engine.connect() as conn:
            return scalars.last_points(conn, _resolve(conn, experiment_id), title, n)

    def metrics(
        self, experiment_id: str, title: str | None = None, series: str | None = None
    ) -> dict[str, dict[str, Series]]:
        with self.engine.connect() as conn:
            return scalars.metrics(conn, _resolve(conn, experiment_id), title, series)

    def metric_view(
        self,
        experiment_id: str,
        title: str,
        *,
        series: str | None = None,
        x: str = "step",
        x_min: float | None = None,
        x_max: float | None = None,
        max_points: int = 1000,
    ) -> dict[str, SeriesView]:
        with self.engine.connect() as conn:
            full = _resolve(conn, experiment_id)
            return scalars.view(
                conn, full, title, series=series, x=x, x_min=x_min, x_max=x_max, max_points=max_points
            )

    def experiment_columns(self, ids: Sequence[str], columns: Sequence[str]) -> dict[str, dict[str, Any]]:
        with self.engine.connect() as conn:
            return column_values(conn, list(ids), list(columns))

    def column_names(self, projects: Sequence[str] | None = None) -> dict[str, list[str]]:
        keys_q = select(ParamRow.c.key).distinct().order_by(ParamRow.c.key).limit(500)
        titles_q = select(SeriesRow.c.title).distinct().order_by(SeriesRow.c.title).limit(500)
        if projects is not None:
            visible = select(ExperimentRow.c.id).where(ExperimentRow.c.project.in_(list(projects)))
            keys_q = keys_q.where(ParamRow.c.experiment_id.in_(visible))
            titles_q = titles_q.where(SeriesRow.c.experiment_id.in_(visible))
        with self.engine.connect() as conn:
            params = [str(k) for k in conn.execute(keys_q).scalars()]
            titles = conn.execute(titles_q).scalars()
            return {"params": params, "metrics": [str(t) for t in titles]}

    def annotate(
        self, experiment_id: str, *, tags: Sequence[str] | None = None, notes: str | None = None
    ) -> Experiment:
        values: dict[str, Any] = {}
        if tags is not None:
            clean = []
            for t in tags:
                t = str(t).strip()
                if problem := label_problem(t, "tag", MAX_TAG):
                    raise UsageError(problem)
                if t not in clean:
                    clean.append(t)
            values["tags"] = clean
        if notes is not None:
            if len(notes) > 100_000:
                raise UsageError("notes are limited to 100,000 characters")
            values["notes"] = notes.replace("\x00", "\ufffd")
        with self._writer.begin() as conn:
            full = _resolve(conn, experiment_id)
            if values:
                conn.execute(update(ExperimentRow).where(ExperimentRow.c.id == full).values(**values))
        return self.get_experiment(full)

    def event_count(self, stream: str) -> int:
        """How many events of a stream are stored (for tests and diagnostics)."""
        query = select(func.count()).select_from(EventKeyRow).where(EventKeyRow.c.stream == stream)
        with self.engine.connect() as conn:
            return int(conn.execute(query).scalar_one())


def _write(conn: Connection, events: Sequence[Event], removed: list[tuple[str, str]]) -> int:
    removed.clear()  # a retried transaction starts over
    fresh = new_events(DriverDb(conn), events)
    ev_sql.apply_events(conn, fresh, removed)
    return len(fresh)


if TYPE_CHECKING:  # mypy checks here that SqlStore implements every protocol it is used as

    def _implements(store: SqlStore) -> tuple[IngestStore, GroupStore]:
        return store, store
