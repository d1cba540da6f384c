"""A group's trials as the domain's ``Trial``s, read in the caller's connection: what
``sql.groups.list_trials`` answers and what a group's ``group.finished`` alert tells
(``sql.alerts``), read one way."""

from __future__ import annotations

from sqlalchemy import Connection, select

from phalanx.domain import Trial
from phalanx.store.sql.models import TrialRow


def trials_of(conn: Connection, group_id: str) -> list[Trial]:
    """``group_id``'s trials in their order (``number``)."""
    rows = conn.execute(
        select(TrialRow).where(TrialRow.c.group_id == group_id).order_by(TrialRow.c.number)
    ).all()
    return [Trial(**{k: r._mapping[k] for k in Trial.__dataclass_fields__}) for r in rows]
