"""A lean read path into a SQLite store: the standard library's sqlite3, no SQLAlchemy, no Alembic.

`phalanx ls`, `get`, `logs`, `metrics`, `params`, `artifacts` and `run --detach` (which waits for its
experiment's row) used to pay 0.3-0.4 CPU-s for importing SQLAlchemy before reading a few rows
(issues 30 and 42, docs/cli-speed.md). ``LiteReader`` answers the few reads those paths make,
returning exactly the domain objects ``SqlStore`` returns (tests/unit/store/test_lite_reader.py
compares them). It never writes and never migrates: ``LiteReader.open`` returns None whenever the
full store must be opened instead — not SQLite, no file yet, or a schema not at the newest revision
(opening the full store migrates it).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

from phalanx.errors import UsageError
from phalanx.store.private_file import tighten

if TYPE_CHECKING:  # the domain's dataclasses: `run --detach`'s probe does without them
    from phalanx.domain import Experiment, ExperimentFilter, LogLine, Page, Replica, Series
    from phalanx.share import Limit
    from phalanx.store.artifacts import ArtifactStore
    from phalanx.store.base import ArtifactRecord, ModelRecord, ParamRecord

# the columns ``SqlStore`` reads for an experiment (all but `repro`, which only store.repro() reads)
_EXPERIMENT_COLUMNS = (
    "id, name, project, status, framework, backend, cluster, tags, topology, spec_text, plan, reason,"
    " created_at, started_at, finished_at, handle, notes, group_id, kind"
)
_REPLICA_COLUMNS = (
    'experiment_id, name, role, "index", rank, state, host, pid, exit_code, reason, resources,'
    " started_at, finished_at"
)
# the columns an experiment list may be ordered by (SqlStore's _ORDER)
ORDER_COLUMNS = frozenset(
    {"created_at", "name", "project", "status", "started_at", "finished_at", "id", "framework", "group_id"}
)
_ROLE_ORDER = {"master": 0, "worker": 1, "ps": 2}  # Role values (a StrEnum: equal keys)
_ID_MOST = 32  # the longest id prefix (store.sql.lookup.ID_PREFIX)
BUSY_TIMEOUT_S = 120.0  # as long as SqlStore waits for a writer (engine.BUSY_TIMEOUT_MS)


def sqlite_path(database_url: str) -> Path | None:
    """The file a ``sqlite:///PATH`` URL names, its percent escapes decoded as SQLAlchemy decodes
    them; None for any other URL (PostgreSQL, in-memory, a URL with query options SQLAlchemy would
    interpret)."""
    for prefix in ("sqlite:///", "sqlite+pysqlite:///"):
        if database_url.startswith(prefix):
            rest = database_url[len(prefix) :]
            if rest and "?" not in rest and rest != ":memory:":
                return Path(unquote(rest))
    return None


class LiteReader:
    """Reads experiments and replicas of an up-to-date SQLite store (see the module's docstring)."""

    server_url: str | None = None  # this machine's store (``Door.server_url``)

    def __init__(self, connection: sqlite3.Connection, artifacts_root: str | None = None) -> None:
        self._conn = connection
        self._artifacts_root = artifacts_root
        self._artifact_store: ArtifactStore | None = None

    @classmethod
    def open(cls, database_url: str, head: str, artifacts_root: str | None = None) -> LiteReader | None:
        """A reader of the store at ``database_url`` if it is a SQLite file stamped with revision
        ``head``; None when the full store must be opened instead. Raises nothing. ``artifacts_root``:
        where the experiments' files are (``Settings.artifacts_root``), for what reads them
        (``run_details``: the code each attempt ran)."""
        path = sqlite_path(database_url)
        if path is None or not path.is_file():
            return None
        tighten(path)  # an older version's 0644 store is its owner's alone once read
        try:
            conn = sqlite3.connect(f"file:{quote(str(path))}?mode=rw", uri=True, timeout=BUSY_TIMEOUT_S)
        except sqlite3.Error:
            return None
        try:
            stamp = conn.execute("SELECT version_num FROM alembic_version").fetchall()
        except sqlite3.Error:  # no stamp yet (a store being created): the full store creates it
            conn.close()
            return None
        if stamp != [(head,)]:
            conn.close()
            return None
        return cls(conn, artifacts_root)

    @property
    def artifact_store(self) -> ArtifactStore | None:
        """The experiments' files (``SqlStore.artifact_store``), opened at the first use."""
        if self._artifact_store is None and self._artifacts_root is not None:
            from phalanx.store.artifacts import ArtifactStore  # why: `phalanx ls` reads no files

            self._artifact_store = ArtifactStore(self._artifacts_root)
        return self._artifact_store

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> LiteReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def has_experiment(self, experiment_id: str) -> bool:
        """Whether an experiment with exactly this id is stored."""
        row = self._conn.execute("SELECT 1 FROM experiments WHERE id = ?", (experiment_id,)).fetchone()
        return row is not None

    def experiment_state(self, experiment_id: str) -> tuple[str, str | None] | None:
        """The status and reason of the experiment with exactly this id; None when not stored."""
        row = self._conn.execute(
            "SELECT status, reason FROM experiments WHERE id = ?", (experiment_id,)
        ).fetchone()
        return None if row is None else (str(row[0]), row[1])

    def find_experiment(self, experiment_id: str) -> Experiment | None:
        """The experiment an id or a unique prefix of one names (as ``Store.get_experiment``); None
        when none or several match or the text is no id: the full store words those answers (a
        group's name, "ambiguous", "did you mean")."""
        typed = experiment_id.strip()
        if any("\ud800" <= c <= "\udfff" for c in typed):  # $'\xff' typed: in no id, and unbindable
            return None
        select = f"SELECT {_EXPERIMENT_COLUMNS} FROM experiments WHERE "
        rows = self._conn.execute(select + "id = ?", (typed,)).fetchall()  # exactly, as typed, first
        text = typed.lower()
        if not rows and text != typed:
            rows = self._conn.execute(select + "id = ?", (text,)).fetchall()
        if not rows and text.isascii() and text.isalnum() and len(text) <= _ID_MOST:  # lookup.ID_PREFIX
            rows = self._conn.execute(select + "id LIKE ? LIMIT 2", (f"{text}%",)).fetchall()
        return _experiment(rows[0]) if len(rows) == 1 else None

    def get_experiment(self, experiment_id: str) -> Experiment:
        """As ``Store.get_experiment`` for an id ``find_experiment`` answers; NotFound otherwise."""
        found = self.find_experiment(experiment_id)
        if found is None:
            from phalanx.errors import NotFound  # why: `run --detach`'s probe raises none

            raise NotFound(f"no experiment {experiment_id!r}")
        return found

    def logs(
        self, experiment_id: str, replica: str | None = None, offset: int = 0, limit: int | None = None
    ) -> list[LogLine]:
        """As ``Store.logs`` for an exact id (no prefix): ``replica``'s lines from its ``offset`` on,
        or every replica's by time, skipping ``offset`` lines."""
        from phalanx.domain import LogLine  # why: `run --detach` needs no domain model

        query = 'SELECT "offset", replica, text, time, stream FROM logs WHERE experiment_id = ?'
        if replica is not None:
            query += ' AND replica = ? AND "offset" >= ? ORDER BY "offset" LIMIT ?'
            params: tuple[Any, ...] = (experiment_id, replica, offset, -1 if limit is None else limit)
        else:
            query += " ORDER BY time, id LIMIT ? OFFSET ?"
            params = (experiment_id, -1 if limit is None else limit, offset)
        rows = self._conn.execute(query, params).fetchall()
        return [LogLine(offset=o, replica=r, text=t, time=tm, stream=s) for o, r, t, tm, s in rows]

    def metric_titles(self, experiment_id: str) -> dict[str, list[str]]:
        """As ``Store.metric_titles`` for an exact id: chart title -> its series names, sorted."""
        out: dict[str, list[str]] = {}
        for _, title, series in self._series(experiment_id, None, None):
            out.setdefault(title, []).append(series)
        return out

    def metrics(
        self, experiment_id: str, title: str | None = None, series: str | None = None
    ) -> dict[str, dict[str, Series]]:
        """As ``Store.metrics`` for an exact id: title -> series -> its points by step (a series
        with no point left out), decoded as the full store decodes them (``store.chunks``)."""
        from phalanx.domain import Series  # why: `run --detach` needs no domain model
        from phalanx.store import chunks  # why: nor zlib and the chunks' codec

        out: dict[str, dict[str, Series]] = {}
        for sid, t, s in self._series(experiment_id, title, series):
            found = chunks.read(self._fetch, sid)
            if found.steps:
                out.setdefault(t, {})[s] = Series(found.steps, found.values, found.times)
        return out

    def _series(
        self, experiment_id: str, title: str | None, series: str | None
    ) -> list[tuple[int, str, str]]:
        """(id, title, series) of the experiment's series, by title then series (scalars._keys)."""
        query = "SELECT id, title, series FROM series WHERE experiment_id = ?"
        params: list[Any] = [experiment_id]
        for column, value in (("title", title), ("series", series)):
            if value is not None:
                query += f" AND {column} = ?"
                params.append(value)
        rows = self._conn.execute(query + " ORDER BY title, series", params).fetchall()
        return [(int(i), str(t), str(s)) for i, t, s in rows]

    def list_experiments(self, query: ExperimentFilter | None = None) -> Page[Experiment]:
        """As ``Store.list_experiments``: one page, with the total of all that match."""
        from phalanx.domain import ExperimentFilter, ExperimentStatus, Page  # why: `run --detach`: no domain

        if query is None:
            query = ExperimentFilter()
        q = query
        where: list[str] = []
        args: list[Any] = []
        if q.status is not None:
            where.append("status = ?")
            args.append(ExperimentStatus(q.status).value)
        if q.project:
            where.append("project = ?")
            args.append(q.project)
        if q.group_id:
            where.append("group_id = ?")
            args.append(q.group_id)
        if q.tag:
            where.append("CAST(tags AS VARCHAR) LIKE ? ESCAPE '\\'")
            args.append(f'%"{_like(q.tag)}"%')
        if q.text:
            where.append(
                "(lower(id) LIKE ? ESCAPE '\\' OR lower(name) LIKE ? ESCAPE '\\'"
                " OR lower(project) LIKE ? ESCAPE '\\')"
            )
            args.extend([f"%{_like(q.text.lower())}%"] * 3)
        desc = q.order_by.startswith("-")
        column = q.order_by.lstrip("-+")
        if column not in ORDER_COLUMNS:
            raise UsageError(
                f"cannot order experiments by {column!r}; use one of {', '.join(sorted(ORDER_COLUMNS))}"
            )
        if q.limit < 0 or q.offset < 0:
            raise UsageError("offset and limit must not be negative")
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        total = self._conn.execute(f"SELECT count(*) FROM experiments{clause}", args).fetchone()[0]
        rows = self._conn.execute(
            f"SELECT {_EXPERIMENT_COLUMNS} FROM experiments{clause}"
            f" ORDER BY {column} {'DESC' if desc else 'ASC'}, id LIMIT ? OFFSET ?",
            [*args, q.limit, q.offset],
        ).fetchall()
        return Page(items=[_experiment(r) for r in rows], total=int(total), offset=q.offset, limit=q.limit)

    def list_replicas(self, experiment_id: str) -> list[Replica]:
        """As ``Store.list_replicas`` for an exact id (no prefix): masters, workers, then ps."""
        rows = self._conn.execute(
            f"SELECT {_REPLICA_COLUMNS} FROM replicas WHERE experiment_id = ?", (experiment_id,)
        ).fetchall()
        replicas = [_replica(r) for r in rows]
        return sorted(replicas, key=lambda r: (_ROLE_ORDER.get(r.role, 3), r.index, r.name))

    def params(self, experiment_id: str) -> list[ParamRecord]:
        """As ``Store.params`` for an exact id (no prefix): each writer's latest report, merged."""
        from phalanx.store.base import ParamRecord, merge_params  # why: only `params` reads them

        rows = self._conn.execute(
            "SELECT section, key, value, replica, rank, time FROM params WHERE experiment_id = ?"
            " ORDER BY time, id",
            (experiment_id,),
        ).fetchall()
        return merge_params(ParamRecord(s, k, _json(v), r, rank, t) for s, k, v, r, rank, t in rows)

    def artifacts(self, experiment_id: str) -> list[ArtifactRecord]:
        """As ``Store.artifacts`` for an exact id (no prefix): by name."""
        from phalanx.store.base import ArtifactRecord  # why: only `artifacts` reads them

        rows = self._conn.execute(
            "SELECT name, kind, path, size, content_type, replica, rank, time, meta FROM artifacts"
            " WHERE experiment_id = ? ORDER BY name",
            (experiment_id,),
        ).fetchall()
        return [
            ArtifactRecord(
                name=n, kind=k, path=p, size=z, content_type=c, replica=r, rank=rank, time=t,
                metadata=_json(m) or {},
            )
            for n, k, p, z, c, r, rank, t, m in rows
        ]  # fmt: skip

    def models(self, experiment_id: str) -> list[ModelRecord]:
        """As ``Store.models`` for an exact id (no prefix): by name."""
        from phalanx.store.base import ModelRecord  # why: only `get` reads them

        rows = self._conn.execute(
            "SELECT name, format, path, size, replica, time, meta FROM models WHERE experiment_id = ?"
            " ORDER BY name",
            (experiment_id,),
        ).fetchall()
        return [
            ModelRecord(name=n, format=f, path=p, size=z, replica=r, time=t, metadata=_json(m) or {})
            for n, f, p, z, r, t, m in rows
        ]

    def texts(self, experiment_id: str) -> list[dict[str, Any]]:
        """As ``Store.texts`` for an exact id (no prefix): in order, each a dict of its columns."""
        rows = self._conn.execute(
            "SELECT title, text, step, replica, rank, time FROM texts WHERE experiment_id = ?"
            " ORDER BY time, id",
            (experiment_id,),
        ).fetchall()
        keys = ("title", "text", "step", "replica", "rank", "time")
        return [dict(zip(keys, r, strict=True)) for r in rows]

    def repro(self, experiment_id: str) -> dict[str, Any]:
        """As ``Store.repro`` for an exact id (no prefix): {} when nothing was recorded."""
        row = self._conn.execute("SELECT repro FROM experiments WHERE id = ?", (experiment_id,)).fetchone()
        return dict(_json(row[0]) or {}) if row is not None else {}

    def attempts(self, experiment_id: str) -> list[dict[str, Any]]:
        """As ``Store.attempts`` for an exact id (no prefix): in order."""
        rows = self._conn.execute(
            "SELECT number, kind, status, reason, checkpoint_step, started_at, finished_at FROM attempts"
            " WHERE experiment_id = ? ORDER BY number",
            (experiment_id,),
        ).fetchall()
        keys = ("number", "kind", "status", "reason", "checkpoint_step", "started_at", "finished_at")
        return [dict(zip(keys, r, strict=True)) for r in rows]

    def replica_starts(self, experiment_id: str) -> dict[str, int]:
        """As ``Store.replica_starts`` for an exact id (no prefix)."""
        rows = self._conn.execute(
            'SELECT replica, "last" FROM replica_starts WHERE experiment_id = ? ORDER BY replica',
            (experiment_id,),
        )
        return {str(r): int(n) for r, n in rows}

    def last_points(self, experiment_id: str, title: str, n: int) -> dict[str, Series]:
        """As ``Store.last_points`` for an exact id: series -> its last ``n`` points by step."""
        from phalanx.domain import Series  # why: `run --detach` needs no domain model
        from phalanx.store import chunks  # why: nor zlib and the chunks' codec

        out: dict[str, Series] = {}
        for sid, _, name in self._series(experiment_id, title, None):
            found = chunks.last(self._fetch, sid, n)
            out[name] = Series(found.steps, found.values, found.times)
        return out

    def series_replicas(self, experiment_id: str, title: str) -> dict[str, str]:
        """As ``Store.series_replicas`` for an exact id: series -> the replica of its latest point."""
        from phalanx.store import chunks  # why: `run --detach` needs no codec

        out: dict[str, str] = {}
        for sid, _, name in self._series(experiment_id, title, None):
            replica = chunks.latest_replica(self._fetch, sid)
            if replica:
                out[name] = replica
        return out

    def run_details(self, experiment_id: str) -> dict[str, Any]:
        """As ``Store.run_details`` for an exact id (``store.details``, as the full store)."""
        from phalanx.store.details import run_details  # why: only `get` reads them

        return run_details(self, experiment_id)

    def _fetch(self, sql: str, params: tuple[Any, ...]) -> list[Any]:
        return self._conn.execute(sql, params).fetchall()

    def has_rows(self, table: str) -> bool:
        """Whether one of the store's own tables (a name of ours, never a user's) has a row."""
        if not table.replace("_", "").isalnum():
            raise ValueError(f"not a table name: {table!r}")
        return self._conn.execute(f'SELECT 1 FROM "{table}" LIMIT 1').fetchone() is not None

    def limits(self, target: str) -> dict[str, Limit]:
        """Every project's quota on ``target`` (as ``store.quotas.limits``)."""
        from phalanx.share import quota_of  # why: `phalanx ls` imports this module: no domain

        rows = self._conn.execute(
            "SELECT project, target, cores, gpus, memory_mib, max_waiting FROM project_quotas"
            " WHERE target = ?",
            (target,),
        ).fetchall()
        return {q.project: q.limit for q in map(quota_of, rows)}

    def secret_ciphertexts(self, project: str) -> dict[str, str]:
        """As ``store.sql.secrets.ciphertexts``: the project's secrets by name, still encrypted."""
        query = "SELECT name, ciphertext FROM project_secrets WHERE project = ?"
        rows = self._conn.execute(query, (project,))
        return {str(name): str(text) for name, text in rows}

    def ingest_offsets(self) -> dict[str, int]:
        """How far ingest has read each spool stream (bytes), by stream name."""
        return {s: int(o) for s, o in self._conn.execute('SELECT stream, "offset" FROM ingest_positions')}


def _like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _json(text: str | float | None) -> Any:
    """A JSON column's value: its text parsed; a number SQLite already made one (a column declared
    JSON has numeric affinity: a parameter's value stored before migration 0021 declared its column
    TEXT may be one)."""
    if text is None or isinstance(text, int | float):
        return text
    return json.loads(text)


def _experiment(r: tuple[Any, ...]) -> Experiment:
    from phalanx.domain import Experiment, ExperimentStatus  # here: `run --detach`'s probe needs none

    return Experiment(
        id=r[0],
        name=r[1],
        project=r[2],
        status=ExperimentStatus(r[3]),
        framework=r[4],
        backend=r[5],
        cluster=r[6],
        tags=tuple(_json(r[7]) or ()),
        topology=dict(_json(r[8]) or {}),
        spec_text=r[9],
        plan=dict(_json(r[10]) or {}),
        reason=r[11],
        created_at=r[12],
        started_at=r[13],
        finished_at=r[14],
        handle=r[15],
        notes=r[16],
        group_id=r[17],
        kind=r[18] or "training",
    )


def _replica(r: tuple[Any, ...]) -> Replica:
    from phalanx.domain import Replica, ReplicaState, Role  # why: `run --detach` needs no domain model

    return Replica(
        experiment_id=r[0],
        name=r[1],
        role=Role(r[2]),
        index=r[3],
        rank=r[4],
        state=ReplicaState(r[5]),
        host=r[6],
        pid=r[7],
        exit_code=r[8],
        reason=r[9],
        resources=dict(_json(r[10]) or {}),
        started_at=r[11],
        finished_at=r[12],
    )
