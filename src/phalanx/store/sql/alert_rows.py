"""ORM rows of a project's alert hooks (issue 43 item 5), beside ``models`` (which is near its size
limit) on the same ``Base``: the hooks, their outbox of deliveries, and each delivery's attempts.
Migrations 0017_alert_hooks_i43 and 0018_alert_group_finished_i43."""

from __future__ import annotations

from sqlalchemy import Float, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from phalanx.store.sql.models import Base


class AlertHookRow(Base):
    """A webhook of a project: the URL POSTed to, the experiment ends it is told about (a comma list
    of failed, succeeded, stopped) and the secret its bodies are signed with (HMAC-SHA256)."""

    __tablename__ = "alert_hooks"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    project: Mapped[str] = mapped_column(String(128), index=True)
    url: Mapped[str] = mapped_column(Text)
    events: Mapped[str] = mapped_column(String(128))
    secret: Mapped[str] = mapped_column(String(256))
    created_by: Mapped[str | None] = mapped_column(String(128), nullable=True)
    created_at: Mapped[float] = mapped_column(Float)


class AlertDeliveryRow(Base):
    """One event for one hook: written in the transaction that recorded the end it reports (the
    outbox), then sent by the server until a 2xx answer (``delivered``) or the last try (``failed``).
    ``payload`` is the event's JSON as recorded then; ``next_at`` is when it is due (or claimed until).
    Its subject: an experiment (``experiment_id``) or a group (``group_id``, migration
    0018_alert_group_finished_i43), exactly one of the two."""

    __tablename__ = "alert_deliveries"
    __table_args__ = (Index("ix_alert_deliveries_due", "state", "next_at"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    hook_id: Mapped[str] = mapped_column(String(32), index=True)
    experiment_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    group_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    event: Mapped[str] = mapped_column(String(32))
    payload: Mapped[str] = mapped_column(Text)
    state: Mapped[str] = mapped_column(String(16))
    attempts: Mapped[int] = mapped_column(Integer)
    next_at: Mapped[float] = mapped_column(Float)
    created_at: Mapped[float] = mapped_column(Float)
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)


class AlertAttemptRow(Base):
    """One try of a delivery: when, the receiver's HTTP status (None: no answer) and why it failed."""

    __tablename__ = "alert_attempts"

    delivery_id: Mapped[str] = mapped_column(String(36), primary_key=True)
    number: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[float] = mapped_column(Float)
    status_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
