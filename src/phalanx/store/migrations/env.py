"""Alembic environment: always run with a connection handed in by phalanx.store.sql.engine."""

from __future__ import annotations

from alembic import context

from phalanx.store.sql import alert_rows  # noqa: F401  (the alert tables are in its metadata too)
from phalanx.store.sql.models import metadata

connection = context.config.attributes.get("connection")
if connection is None:  # pragma: no cover - only reached by a bare `alembic` command
    raise RuntimeError("run migrations through phalanx.store.open_store(), not the alembic command")

context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
