"""Steps are idempotent per attempt: a later attempt's points replace what an earlier one reported.

Why: a restarted group (max_restarts, `phalanx resume`) or a requeued Slurm job runs the training
again from its checkpoint (or from scratch) and reports the same steps a second time; appended, a
40-step run showed 52 points. Each scalar record carries its writer's attempt (PHALANX_ATTEMPT), and
each series remembers, per replica, the latest attempt of that replica that wrote to it and the
first step that attempt reported (``series_attempts``). The invariant: every stored point of that
replica at or after ``attempt_step`` belongs to ``attempt``; its points before it are earlier
attempts' and are kept.

Why per replica: on Kubernetes the kubelet or the training operator restarts each pod on its own
(restartPolicy OnFailure/ExitCode), so one replica may be at its third start while another still
runs its first, both reporting into the same series (every rank reports ``loss``). Kept per series,
the restarted replica's first point would delete the other's points and make its later ones look
late. Per replica, a start only replaces what its own replica reported. Where every replica restarts
together (local restarts, `phalanx resume`, a Slurm requeue) the result is the same as per series.

- A point of a newer attempt than the replica's: the earlier attempts' points at or after its first
  step are deleted, and the series continues from there (no duplicate, no stale tail).
- A point of the same attempt before ``attempt_step``: the earlier attempts' points from there up
  to ``attempt_step`` are deleted (another rank of the replica resumed a little earlier).
- A point of an older attempt (a record that reached the store late): kept only before
  ``attempt_step``; later steps belong to the newer attempt.
- Within one attempt nothing changes (exactly once per record, repeats of a step are kept), and a
  record without an attempt (older writers, system metrics) is appended as it always was.

This runs inside the batch's transaction, before the points are inserted, and only for batches that
carry an attempt; the series rows are locked (PostgreSQL) so two ingesters of two attempts agree.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from sqlalchemy import Connection, insert, select, update

from phalanx.store.batch import ScalarBlock
from phalanx.store.sql import points
from phalanx.store.sql.models import SeriesAttemptRow, SeriesRow

Key = tuple[int, str]  # (series id, replica)


def _first_steps(
    blocks: Sequence[ScalarBlock], ids: dict[tuple[str, str, str], int]
) -> dict[Key, dict[int, int]]:
    """Per series id and replica, and per attempt, the smallest step the batch brings."""
    firsts: dict[Key, dict[int, int]] = {}
    for b in blocks:
        if b.attempt is None or not b.steps:
            continue
        sids = [ids[(b.experiment_id, t, s)] for t, s in b.keys]
        if b.idx is None or len(sids) == 1:
            pairs = [(sids[0], min(b.steps))]
        else:
            low: dict[int, int] = {}
            for k, step in zip(b.idx, b.steps, strict=True):
                if k not in low or step < low[k]:
                    low[k] = step
            pairs = [(sids[k], step) for k, step in low.items()]
        for sid, step in pairs:
            per = firsts.setdefault((sid, b.replica), {})
            per[b.attempt] = min(step, per.get(b.attempt, step))
    return firsts


def reconcile(
    conn: Connection, blocks: Sequence[ScalarBlock], ids: dict[tuple[str, str, str], int]
) -> tuple[list[ScalarBlock], set[int]]:
    """Delete the replica's earlier attempts' points the batch replaces and record each series'
    attempt per replica; returns the blocks without points of older attempts that came too late,
    and the ids of the series that lost points (their summary must be rebuilt)."""
    firsts = _first_steps(blocks, ids)
    if not firsts:
        return list(blocks), set()
    sids = sorted({sid for sid, _ in firsts})
    if conn.dialect.name == "postgresql":  # locked in one order by every writer: no deadlock between two
        conn.execute(
            select(SeriesRow.c.id).where(SeriesRow.c.id.in_(sids)).order_by(SeriesRow.c.id).with_for_update()
        )
    rows = conn.execute(
        select(
            SeriesAttemptRow.c.series_id,
            SeriesAttemptRow.c.replica,
            SeriesAttemptRow.c.attempt,
            SeriesAttemptRow.c.attempt_step,
        ).where(SeriesAttemptRow.c.series_id.in_(sids))
    )
    stored: dict[Key, tuple[int, int]] = {(int(r[0]), str(r[1])): (int(r[2]), int(r[3])) for r in rows}
    rebuild: set[int] = set()
    state: dict[Key, tuple[int | None, int | None]] = {}
    for key, per_attempt in firsts.items():
        sid, replica = key
        cur: int | None
        start: int | None
        cur, start = stored.get(key, (None, None))
        for attempt in sorted(per_attempt):
            first = per_attempt[attempt]
            if cur is None or attempt > cur:  # a newer attempt takes the replica's points over from `first`
                gone = points.delete_steps(conn, sid, replica, first)
                cur, start = attempt, first
            elif attempt == cur and start is not None and first < start:
                gone = points.delete_steps(conn, sid, replica, first, start)
                start = first
            else:
                continue
            if gone:
                rebuild.add(sid)
        state[key] = (cur, start)
        if key not in stored:
            conn.execute(
                insert(SeriesAttemptRow).values(
                    series_id=sid, replica=replica, attempt=cur, attempt_step=start
                )
            )
        elif stored[key] != (cur, start):
            conn.execute(
                update(SeriesAttemptRow)
                .where(SeriesAttemptRow.c.series_id == sid, SeriesAttemptRow.c.replica == replica)
                .values(attempt=cur, attempt_step=start)
            )
    return [_without_stale(b, ids, state) for b in blocks], rebuild


def _without_stale(
    b: ScalarBlock, ids: dict[tuple[str, str, str], int], state: dict[Key, tuple[int | None, int | None]]
) -> ScalarBlock:
    """The block without its points that a newer attempt of their replica has replaced already."""
    if b.attempt is None:
        return b
    sids = [ids[(b.experiment_id, t, s)] for t, s in b.keys]
    limits = []
    for sid in sids:
        cur, start = state.get((sid, b.replica), (None, None))
        limits.append(start if cur is not None and start is not None and cur > b.attempt else None)
    if all(limit is None for limit in limits):
        return b
    keep = [
        i
        for i, step in enumerate(b.steps)
        if (limit := limits[0 if b.idx is None else b.idx[i]]) is None or step < limit
    ]
    return dataclasses.replace(
        b,
        idx=None if b.idx is None else [b.idx[i] for i in keep],
        steps=[b.steps[i] for i in keep],
        values=[b.values[i] for i in keep],
        times=[b.times[i] for i in keep],
    )
