"""Applying a batch of events inside one transaction: the store's single write primitive.

Idempotent on each event's (experiment, stream, seq): keys already stored are skipped, new keys are
stored with the rows they produced, in the same transaction, so a retried batch (ingest after a
crash, a client re-POSTing to the server) adds nothing twice. Scalars go in as a few compressed
chunks per series (store.sql.points): a batch of 60,000 points is a handful of rows, not 60,000.
The rows every door shares (keys, console lines, points, positions) are written by
``store.event_writes``; this module writes the other kinds.
"""

from __future__ import annotations

import time as _time
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, Table, delete, insert, or_, select, update

from phalanx.checkpoints import KIND, Checkpoint, Policy, PolicyError, retain
from phalanx.domain import Event, ExperimentStatus, ReplicaState, Role
from phalanx.store.batch import Batch, ScalarBlock, collect, qualified_name
from phalanx.store.event_writes import (
    ReadyPoints,
    append_scalars,
    insert_logs,
    insert_params,
    series_ids,
)
from phalanx.store.sql import alerts, attempts, summary
from phalanx.store.sql.driver import DriverDb
from phalanx.store.sql.models import (
    ArtifactRow,
    ExperimentRow,
    ModelRow,
    ReplicaRow,
    TextRow,
)

SCRIPT_BACKEND = "script"  # the backend column of an experiment a plain script created


def apply_events(
    conn: Connection,
    events: Sequence[Event],
    removed: list[tuple[str, str]] | None = None,
    ready: tuple[Batch, ReadyPoints | None] | None = None,
) -> None:
    """Write the rows of already-deduplicated events. Order inside the batch is kept per kind.
    ``removed`` collects (experiment, artifact path) of checkpoints a retention policy dropped: their
    rows are gone with this transaction, their files are the caller's to delete after it commits.
    ``ready``: these events' rows (``collect``) and points (``prepare_points``), made before the
    transaction."""
    batch, points = ready if ready is not None else (collect(events), None)
    for ev in batch.experiments:
        _create_from_event(conn, ev)
    if batch.scalars:
        insert_scalars(conn, batch.scalars, points)
    if batch.params:
        insert_params(DriverDb(conn), batch.params)
    if batch.texts:
        texts = _texts_of_latest_attempts(conn, batch.texts)
        if texts:
            conn.execute(insert(TextRow), texts)
    for (experiment_id, replica), lines in batch.logs.items():
        insert_logs(DriverDb(conn), experiment_id, replica, lines)
    for row, values in ((ArtifactRow, batch.artifacts), (ModelRow, batch.models)):
        for v in values:
            _upsert_named(conn, row, v)
    policies = {v["experiment_id"]: v["meta"].get("policy") for v in batch.artifacts if v["kind"] == KIND}
    for experiment_id, policy in policies.items():
        dropped = _retain_checkpoints(conn, experiment_id, policy)
        if removed is not None:
            removed.extend((experiment_id, path) for path in dropped)
    for ev, status in batch.statuses:
        _status_from_event(conn, ev, status)
    for experiment_id, record in batch.repros:
        # only a plain script's own record: what a supervised experiment ran its supervisor records
        conn.execute(
            update(ExperimentRow)
            .where(ExperimentRow.c.id == experiment_id, ExperimentRow.c.backend == SCRIPT_BACKEND)
            .values(repro=record)
        )


def _texts_of_latest_attempts(conn: Connection, texts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A text a restarted replica reports again at a step (same title) replaces what its earlier
    attempts reported there, as its points do (store.sql.attempts); one of an older attempt that
    comes late is dropped. Texts without a step or an attempt are kept as they are."""
    keep = []
    for t in texts:
        if t["attempt"] is None or t["step"] is None:
            keep.append(t)
            continue
        same = (
            TextRow.c.experiment_id == t["experiment_id"],
            TextRow.c.title == t["title"],
            TextRow.c.replica == t["replica"],
            TextRow.c.step == t["step"],
        )
        newer = conn.execute(
            select(TextRow.c.id).where(*same, TextRow.c.attempt > t["attempt"]).limit(1)
        ).first()
        if newer is not None:
            continue
        older = or_(TextRow.c.attempt.is_(None), TextRow.c.attempt < t["attempt"])
        conn.execute(delete(TextRow).where(*same, older))
        keep.append(t)
    return keep


def _upsert_named(conn: Connection, row: Table, values: dict[str, Any]) -> None:
    """One artifact (or model) per name. Uploading a name again from the same writer (replica, and
    rank for artifacts) replaces it: a checkpoint refreshed every epoch. A name another writer
    already holds is never overwritten: this upload is stored as ``"NAME [replica rank N]"``."""
    exp, wanted = values["experiment_id"], values["name"]
    held: Any
    if row is ArtifactRow:
        writer: tuple[Any, ...] = (values["replica"], values["rank"])
        held = conn.execute(
            select(ArtifactRow.c.replica, ArtifactRow.c.rank).where(
                ArtifactRow.c.experiment_id == exp, ArtifactRow.c.name == wanted
            )
        ).first()
    else:
        writer = (values["replica"],)
        held = conn.execute(
            select(ModelRow.c.replica).where(ModelRow.c.experiment_id == exp, ModelRow.c.name == wanted)
        ).first()
    if held is not None and tuple(held) != writer:
        values = {**values, "name": qualified_name(wanted, *writer)}
    conn.execute(delete(row).where(row.c.experiment_id == exp, row.c.name == values["name"]))
    conn.execute(insert(row), [values])


def _retain_checkpoints(conn: Connection, experiment_id: str, policy: Any) -> list[str]:
    """Apply the retention policy of the latest checkpoint to the experiment's checkpoints; returns
    the artifact paths of those removed."""
    try:
        chosen = Policy.parse(policy if isinstance(policy, Mapping) else None)
    except PolicyError:
        return []  # the SDK checks the policy; a bad one from elsewhere keeps everything
    if not chosen.active:
        return []
    rows = conn.execute(
        select(
            ArtifactRow.c.id, ArtifactRow.c.name, ArtifactRow.c.path, ArtifactRow.c.meta, ArtifactRow.c.time
        ).where(ArtifactRow.c.experiment_id == experiment_id, ArtifactRow.c.kind == KIND)
    ).all()
    found = [
        Checkpoint(
            r.name,
            int((r.meta or {}).get("step", 0)),
            r.path,
            dict((r.meta or {}).get("metrics") or {}),
            time=r.time,
        )
        for r in rows
    ]
    keep = retain(found, chosen)
    gone = [r for r in rows if r.name not in keep]
    if gone:
        conn.execute(delete(ArtifactRow).where(ArtifactRow.c.id.in_([r.id for r in gone])))
    return [r.path for r in gone]


def insert_scalars(conn: Connection, blocks: Sequence[ScalarBlock], ready: ReadyPoints | None = None) -> None:
    db = DriverDb(conn)
    ids = series_ids(db, {(b.experiment_id, t, s) for b in blocks for t, s in b.keys})
    rebuild: set[int] = set()
    if any(b.attempt is not None for b in blocks):  # a point of a later attempt replaces the step
        blocks, rebuild = attempts.reconcile(conn, blocks, ids)
        ready = None
    append_scalars(db, blocks, ids, ready)
    if rebuild:
        summary.rebuild(conn, rebuild)


def _create_from_event(conn: Connection, ev: Event) -> None:
    """A plain `python script.py` with Task.init made this experiment: create it once."""
    d = ev.data
    exists = conn.execute(select(ExperimentRow.c.id).where(ExperimentRow.c.id == ev.experiment_id)).scalar()
    if exists is not None:
        return
    conn.execute(
        insert(ExperimentRow).values(
            id=ev.experiment_id,
            name=str(d.get("name") or ev.experiment_id),
            project=str(d.get("project") or "default"),
            status=ExperimentStatus.RUNNING.value,
            framework=d.get("framework"),
            backend=SCRIPT_BACKEND,  # never an engine's: a stop then only looks at runs/<id>/script.pid
            cluster=None,
            tags=list(d.get("tags") or []),
            topology={"master": 1},
            spec_text=None,
            plan={"command": d.get("command")} if d.get("command") else {},
            reason=None,
            created_at=ev.time or _time.time(),
            started_at=ev.time or _time.time(),
            finished_at=None,
            handle=None,  # an engine handle from ingest would be something a stop acts on
            kind="service" if d.get("kind") == "service" else "training",  # `phalanx serve`'s
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


def _status_from_event(conn: Connection, ev: Event, status: ExperimentStatus) -> None:
    """The main process of a plain script decided how it ended."""
    d = ev.data
    values: dict[str, Any] = {"status": status.value}
    if status.done:
        values["finished_at"] = ev.time
    if d.get("reason"):
        values["reason"] = str(d["reason"])
    before = None
    if status.done:  # the project's hooks hear of an end once (below); locked as update_experiment locks it
        before = conn.execute(
            select(ExperimentRow.c.status).where(ExperimentRow.c.id == ev.experiment_id).with_for_update()
        ).scalar()
    conn.execute(update(ExperimentRow).where(ExperimentRow.c.id == ev.experiment_id).values(**values))
    state = ReplicaState(status.value) if status.value in set(ReplicaState) else ReplicaState.PENDING
    if d.get("replica_state"):  # a supervisor's outcome left in the spool: each replica's own state
        state = ReplicaState(str(d["replica_state"]))
    replica_values: dict[str, Any] = {"state": state.value}
    if status.done:
        replica_values["finished_at"] = ev.time
    if d.get("exit_code") is not None:
        replica_values["exit_code"] = int(d["exit_code"])
    if d.get("reason"):
        replica_values["reason"] = str(d["reason"])
    if "replica_state" in d:  # converted as collect() checked them (a text "3" is no integer column)
        code, why = d.get("replica_exit_code"), d.get("replica_reason")
        replica_values["exit_code"] = None if code is None else int(code)
        replica_values["reason"] = None if why is None else str(why)
    conn.execute(
        update(ReplicaRow)
        .where(ReplicaRow.c.experiment_id == ev.experiment_id, ReplicaRow.c.name == ev.replica)
        .values(**replica_values)
    )
    if status.done:
        alerts.record_end(conn, ev.experiment_id, before, status.value)
