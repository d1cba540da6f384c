"""Applying a batch of events inside one transaction: the store's single write primitive.

Idempotent on each event's (stream, seq): keys already stored are skipped, new keys are stored with
the rows they produced, in the same transaction, so a retried batch (ingest after a crash, a client
re-POSTing to the server) adds nothing twice. Scalars go in through the driver's bulk path
(executemany on SQLite, COPY on PostgreSQL): that is where the points per second come from.
"""

from __future__ import annotations

import json
import time as _time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, delete, func, insert, select, update

from phalanx.domain import Event, EventKind, ExperimentStatus, ReplicaState, Role
from phalanx.store.sql.models import (
    ArtifactRow,
    EventKeyRow,
    ExperimentRow,
    LogRow,
    ModelRow,
    ParamRow,
    ReplicaRow,
    SeriesRow,
    TextRow,
)

ScalarPoint = tuple[str, str, str, int, float, float, str, int | None]  # exp, title, series, step, ...


def new_events(conn: Connection, events: Sequence[Event]) -> list[Event]:
    """The events whose (stream, seq) is not stored yet (nor repeated earlier in the batch); their
    keys are stored now. Events without a stream are always new."""
    wanted: dict[str, set[int]] = defaultdict(set)
    for ev in events:
        if ev.stream:
            wanted[ev.stream].add(ev.seq)
    seen: set[tuple[str, int]] = set()
    for stream, seqs in wanted.items():
        rows = conn.execute(
            select(EventKeyRow.seq).where(
                EventKeyRow.stream == stream, EventKeyRow.seq.between(min(seqs), max(seqs))
            )
        )
        seen.update((stream, int(s)) for (s,) in rows)
    fresh: list[Event] = []
    keys: list[dict[str, Any]] = []
    for ev in events:
        if ev.stream:
            key = (ev.stream, ev.seq)
            if key in seen:
                continue
            seen.add(key)
            keys.append({"stream": ev.stream, "seq": ev.seq})
        fresh.append(ev)
    if keys:
        conn.execute(insert(EventKeyRow), keys)
    return fresh


def apply_events(conn: Connection, events: Sequence[Event]) -> None:
    """Write the rows of already-deduplicated events. Order inside the batch is kept per kind."""
    scalars: list[ScalarPoint] = []
    params: list[dict[str, Any]] = []
    texts: list[dict[str, Any]] = []
    logs: dict[tuple[str, str], list[tuple[str, str, float]]] = defaultdict(list)
    for ev in events:
        kind = EventKind(ev.kind)
        d = ev.data
        if kind is EventKind.SCALAR:
            scalars.extend(_scalar_points(ev))
        elif kind is EventKind.PARAM:
            params.extend(_param_rows(ev))
        elif kind is EventKind.TEXT:
            step = d.get("step")
            texts.append(
                {
                    "experiment_id": ev.experiment_id,
                    "title": str(d.get("title", "")),
                    "text": str(d.get("text", "")),
                    "step": None if step is None else int(step),
                    "replica": ev.replica,
                    "rank": ev.rank,
                    "time": ev.time,
                }
            )
        elif kind is EventKind.LOG:
            stream = str(d.get("stream", "stdout"))
            for line in _log_lines(d):
                logs[(ev.experiment_id, ev.replica)].append((line, stream, ev.time))
        elif kind is EventKind.ARTIFACT:
            _upsert_artifact(conn, ev)
        elif kind is EventKind.MODEL:
            _upsert_model(conn, ev)
        elif kind is EventKind.EXPERIMENT:
            _create_from_event(conn, ev)
        elif kind is EventKind.STATUS:
            _status_from_event(conn, ev)
    if scalars:
        insert_scalars(conn, scalars)
    if params:
        conn.execute(insert(ParamRow), params)
    if texts:
        conn.execute(insert(TextRow), texts)
    for (experiment_id, replica), lines in logs.items():
        _insert_logs(conn, experiment_id, replica, lines)


def _scalar_points(ev: Event) -> Iterable[ScalarPoint]:
    d = ev.data
    points = d.get("points")
    if points is None:
        step = d.get("step", d.get("iteration", 0))
        yield (ev.experiment_id, str(d["title"]), str(d["series"]), int(step), float(d["value"]),
               float(d.get("time", ev.time)), ev.replica, ev.rank)  # fmt: skip
        return
    exp, replica, rank, t0 = ev.experiment_id, ev.replica, ev.rank, ev.time
    for p in points:  # [title, series, step, value, time?]
        yield (exp, p[0], p[1], int(p[2]), float(p[3]), float(p[4]) if len(p) > 4 else t0, replica, rank)


def _param_rows(ev: Event) -> list[dict[str, Any]]:
    d = ev.data
    section = str(d.get("section") or "General")
    values: Mapping[str, Any] = d["values"] if "values" in d else {str(d["key"]): d.get("value")}
    return [
        {
            "experiment_id": ev.experiment_id,
            "section": section,
            "key": str(k),
            "value": _jsonable(v),
            "replica": ev.replica,
            "rank": ev.rank,
            "time": ev.time,
        }
        for k, v in values.items()
    ]


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return str(value)


def _log_lines(d: Mapping[str, Any]) -> list[str]:
    if "lines" in d:
        return [str(x) for x in d["lines"]]
    text = str(d.get("text", ""))
    lines = text.split("\n")
    if lines and lines[-1] == "" and len(lines) > 1:
        lines.pop()
    return lines


def series_ids(conn: Connection, keys: set[tuple[str, str, str]]) -> dict[tuple[str, str, str], int]:
    """Ids of (experiment, title, series), created on first use (concurrent creators are fine)."""
    ids: dict[tuple[str, str, str], int] = {}
    for exp, title, series in keys:
        cond = (SeriesRow.experiment_id == exp, SeriesRow.title == title, SeriesRow.series == series)
        found = conn.execute(select(SeriesRow.id).where(*cond)).scalar()
        if found is None:
            stmt = _dialect_insert(conn, SeriesRow).values(experiment_id=exp, title=title, series=series)
            conn.execute(stmt.on_conflict_do_nothing())
            found = conn.execute(select(SeriesRow.id).where(*cond)).scalar_one()
        ids[(exp, title, series)] = int(found)
    return ids


def _dialect_insert(conn: Connection, row: Any) -> Any:
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        return pg_insert(row)
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    return sqlite_insert(row)


def insert_scalars(conn: Connection, points: Sequence[ScalarPoint]) -> None:
    ids = series_ids(conn, {(p[0], p[1], p[2]) for p in points})
    rows = [(ids[(p[0], p[1], p[2])], p[3], p[4], p[5], p[6], p[7]) for p in points]
    raw = conn.connection.driver_connection
    assert raw is not None
    if conn.dialect.name == "postgresql":
        with (
            raw.cursor() as cur,
            cur.copy("COPY scalars (series_id, step, value, time, replica, rank) FROM STDIN") as copy,
        ):
            for r in rows:
                copy.write_row(r)
    else:
        cur = raw.cursor()
        cur.executemany(
            "INSERT INTO scalars (series_id, step, value, time, replica, rank) VALUES (?, ?, ?, ?, ?, ?)",
            rows,
        )
        cur.close()


def _insert_logs(
    conn: Connection, experiment_id: str, replica: str, lines: list[tuple[str, str, float]]
) -> None:
    last = conn.execute(
        select(func.max(LogRow.offset)).where(
            LogRow.experiment_id == experiment_id, LogRow.replica == replica
        )
    ).scalar()
    base = 0 if last is None else int(last) + 1
    conn.execute(
        insert(LogRow),
        [
            {
                "experiment_id": experiment_id,
                "replica": replica,
                "offset": base + i,
                "stream": stream,
                "text": text,
                "time": t,
            }
            for i, (text, stream, t) in enumerate(lines)
        ],
    )


def _upsert_artifact(conn: Connection, ev: Event) -> None:
    d = ev.data
    conn.execute(
        delete(ArtifactRow).where(
            ArtifactRow.experiment_id == ev.experiment_id, ArtifactRow.name == d["name"]
        )
    )
    conn.execute(
        insert(ArtifactRow).values(
            experiment_id=ev.experiment_id,
            name=str(d["name"]),
            kind=str(d.get("kind", "file")),
            path=str(d["path"]),
            size=int(d.get("size", 0)),
            content_type=str(d.get("content_type", "application/octet-stream")),
            replica=ev.replica,
            rank=ev.rank,
            time=ev.time,
            meta=dict(d.get("metadata") or {}),
        )
    )


def _upsert_model(conn: Connection, ev: Event) -> None:
    d = ev.data
    conn.execute(
        delete(ModelRow).where(ModelRow.experiment_id == ev.experiment_id, ModelRow.name == d["name"])
    )
    conn.execute(
        insert(ModelRow).values(
            experiment_id=ev.experiment_id,
            name=str(d["name"]),
            format=str(d.get("format", "")),
            path=str(d["path"]),
            size=int(d.get("size", 0)),
            replica=ev.replica,
            time=ev.time,
            meta=dict(d.get("metadata") or {}),
        )
    )


def _create_from_event(conn: Connection, ev: Event) -> None:
    """A plain `python script.py` with Task.init made this experiment: create it once."""
    d = ev.data
    exists = conn.execute(select(ExperimentRow.id).where(ExperimentRow.id == ev.experiment_id)).scalar()
    if exists is not None:
        return
    conn.execute(
        insert(ExperimentRow).values(
            id=ev.experiment_id,
            name=str(d.get("name") or ev.experiment_id),
            project=str(d.get("project") or "default"),
            status=ExperimentStatus.RUNNING.value,
            framework=d.get("framework"),
            backend=d.get("backend", "script"),
            cluster=None,
            tags=list(d.get("tags") or []),
            topology={"master": 1},
            spec_text=None,
            plan={"command": d.get("command")} if d.get("command") else {},
            reason=None,
            created_at=ev.time or _time.time(),
            started_at=ev.time or _time.time(),
            finished_at=None,
            handle=str(d["pid"]) if d.get("pid") is not None else None,
        )
    )
    conn.execute(
        insert(ReplicaRow).values(
            experiment_id=ev.experiment_id,
            name=ev.replica,
            role=ev.role or Role.MASTER.value,
            index=ev.index,
            rank=ev.rank,
            state=ReplicaState.RUNNING.value,
            host=d.get("host"),
            pid=d.get("pid"),
            exit_code=None,
            reason=None,
            resources={},
            started_at=ev.time,
            finished_at=None,
        )
    )


def _status_from_event(conn: Connection, ev: Event) -> None:
    """The main process of a plain script decided how it ended."""
    d = ev.data
    status = ExperimentStatus(d["status"])
    values: dict[str, Any] = {"status": status.value}
    if status.done:
        values["finished_at"] = ev.time
    if d.get("reason"):
        values["reason"] = str(d["reason"])
    conn.execute(update(ExperimentRow).where(ExperimentRow.id == ev.experiment_id).values(**values))
    state = ReplicaState(status.value) if status.value in set(ReplicaState) else ReplicaState.PENDING
    replica_values: dict[str, Any] = {"state": state.value}
    if status.done:
        replica_values["finished_at"] = ev.time
    if d.get("exit_code") is not None:
        replica_values["exit_code"] = int(d["exit_code"])
    if d.get("reason"):
        replica_values["reason"] = str(d["reason"])
    conn.execute(
        update(ReplicaRow)
        .where(ReplicaRow.experiment_id == ev.experiment_id, ReplicaRow.name == ev.replica)
        .values(**replica_values)
    )
