"""submissions: durable on answer, keys per user with a fingerprint

A submit is now written (its experiment or group row, this row in state ``accepted``) in one
transaction before it is answered; the server's launcher starts it afterwards (state ``launched``).
An idempotency key is unique per user (``user``, ``idempotency_key``), carries the request's
fingerprint (a replay with another body is refused) and expires (``key_expires_at``). Rows written
before this revision were started in the request that made them: state ``launched``, no user.

Revision ID: 0015_plane_submissions
Revises: 0014_service_experiment_kind_i27
Create Date: 2026-12-01 23:00:00
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0015_plane_submissions"
down_revision = "0014_service_experiment_kind_i27"
branch_labels = None
depends_on = None

_TMP = "_submissions_0015"


def _table(name: str, *, new: bool) -> None:
    columns: list[Any] = [
        sa.Column("experiment_id", sa.String(length=32), nullable=False),
        sa.Column("idempotency_key", sa.String(length=200), nullable=True),
        sa.Column("bundle_sha256", sa.String(length=64), nullable=False),
        sa.Column("submitted_at", sa.Float(), nullable=False),
    ]
    constraints: list[Any] = [sa.PrimaryKeyConstraint("experiment_id")]
    if new:
        columns += [
            sa.Column("kind", sa.String(length=16), server_default="experiment", nullable=False),
            sa.Column("user", sa.String(length=200), nullable=True),
            sa.Column("fingerprint", sa.String(length=64), nullable=True),
            sa.Column("key_expires_at", sa.Float(), nullable=True),
            sa.Column("state", sa.String(length=16), server_default="launched", nullable=False),
        ]
        constraints.append(sa.UniqueConstraint("user", "idempotency_key", name="uq_submissions_user_key"))
    else:
        constraints.append(sa.UniqueConstraint("idempotency_key"))
    op.create_table(name, *columns, *constraints)


def upgrade() -> None:
    # a copy into the new shape (SQLite cannot change a unique constraint in place; one way for both)
    _table(_TMP, new=True)
    op.execute(
        f"INSERT INTO {_TMP} (experiment_id, idempotency_key, bundle_sha256, submitted_at, kind, state) "
        "SELECT experiment_id, idempotency_key, bundle_sha256, submitted_at, 'experiment', 'launched' "
        "FROM submissions"
    )
    op.drop_table("submissions")
    op.rename_table(_TMP, "submissions")


def downgrade() -> None:
    _table(_TMP, new=False)
    # keys were global before: of several users' rows with one key, the oldest keeps it
    op.execute(
        f"INSERT INTO {_TMP} (experiment_id, idempotency_key, bundle_sha256, submitted_at) "
        "SELECT s.experiment_id, CASE WHEN s.idempotency_key IS NULL OR EXISTS (SELECT 1 FROM submissions o "
        "WHERE o.idempotency_key = s.idempotency_key AND (o.submitted_at < s.submitted_at OR "
        "(o.submitted_at = s.submitted_at AND o.experiment_id < s.experiment_id))) THEN NULL "
        "ELSE s.idempotency_key END, s.bundle_sha256, s.submitted_at FROM submissions s"
    )
    op.drop_table("submissions")
    op.rename_table(_TMP, "submissions")
