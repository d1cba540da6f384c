"""The tables of a project's alert hooks (issue 43 item 5), beside ``models`` (which is near its size
limit) in the same ``metadata``: the hooks, their outbox of deliveries, and each delivery's attempts.
Migrations 0017_alert_hooks_i43, 0018_alert_group_finished_i43 and 0019_alert_model_alias_i43."""

from __future__ import annotations

from sqlalchemy import Column, Float, Index, Integer, String, Table, Text

from phalanx.store.sql.models import metadata

# A webhook of a project: the URL POSTed to, the experiment ends it is told about (a comma list
# of failed, succeeded, stopped) and the secret its bodies are signed with (HMAC-SHA256).
AlertHookRow = Table(
    "alert_hooks",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("project", String(128), index=True, nullable=False),
    Column("url", Text, nullable=False),
    Column("events", String(128), nullable=False),
    Column("secret", String(256), nullable=False),
    Column("created_by", String(128), nullable=True),
    Column("created_at", Float, nullable=False),
)


# One event for one hook: written in the transaction that recorded the end it reports (the
# outbox), then sent by the server until a 2xx answer (``delivered``) or the last try (``failed``).
# ``payload`` is the event's JSON as recorded then; ``next_at`` is when it is due (or claimed until).
# Its subject: an experiment (``experiment_id``), a group (``group_id``, migration
# 0018_alert_group_finished_i43) or a registered model whose alias moved (``model``, migration
# 0019_alert_model_alias_i43), exactly one of the three.
AlertDeliveryRow = Table(
    "alert_deliveries",
    metadata,
    Column("id", String(36), primary_key=True),
    Column("hook_id", String(32), index=True, nullable=False),
    Column("experiment_id", String(32), nullable=True),
    Column("group_id", String(32), nullable=True),
    Column("model", String(100), nullable=True),
    Column("event", String(32), nullable=False),
    Column("payload", Text, nullable=False),
    Column("state", String(16), nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("next_at", Float, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("finished_at", Float, nullable=True),
    Index("ix_alert_deliveries_due", "state", "next_at"),
)


# One try of a delivery: when, the receiver's HTTP status (None: no answer) and why it failed.
AlertAttemptRow = Table(
    "alert_attempts",
    metadata,
    Column("delivery_id", String(36), primary_key=True),
    Column("number", Integer, primary_key=True),
    Column("at", Float, nullable=False),
    Column("status_code", Integer, nullable=True),
    Column("error", Text, nullable=True),
)
