"""event de-duplication keys name their experiment: (stream, seq, experiment_id)

With (stream, seq) alone, a writer of one experiment that knew another experiment's stream id could
make that experiment's later records count as already stored. Keys stored before this revision get
experiment_id '' (``models.LEGACY_KEY``), which still holds for every experiment, so a batch retried
across the upgrade is not stored twice.

Revision ID: 0006_event_key_experiment
Revises: 0005_kattempt
Create Date: 2026-11-23 23:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006_event_key_experiment"
down_revision = "0005_kattempt"
branch_labels = None
depends_on = None

_TMP = "_event_keys_0006"


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        # SQLite cannot change a primary key in place: copy into a table with the new key
        op.create_table(
            _TMP,
            sa.Column("stream", sa.String(length=128), nullable=False),
            sa.Column("seq", sa.BigInteger(), autoincrement=False, nullable=False),
            sa.Column("experiment_id", sa.String(length=32), server_default="", nullable=False),
            sa.PrimaryKeyConstraint("stream", "seq", "experiment_id", name="event_keys_pkey"),
        )
        op.execute(f"INSERT INTO {_TMP} (stream, seq, experiment_id) SELECT stream, seq, '' FROM event_keys")
        op.drop_table("event_keys")
        op.rename_table(_TMP, "event_keys")
        return
    # PostgreSQL: a column with a constant default is added without rewriting the table
    op.add_column(
        "event_keys", sa.Column("experiment_id", sa.String(length=32), server_default="", nullable=False)
    )
    op.drop_constraint("event_keys_pkey", "event_keys", type_="primary")
    op.create_primary_key("event_keys_pkey", "event_keys", ["stream", "seq", "experiment_id"])


def downgrade() -> None:
    # one key per (stream, seq) again: the same key stored for two experiments is kept once
    if op.get_bind().dialect.name == "sqlite":
        op.create_table(
            _TMP,
            sa.Column("stream", sa.String(length=128), nullable=False),
            sa.Column("seq", sa.BigInteger(), autoincrement=False, nullable=False),
            sa.PrimaryKeyConstraint("stream", "seq"),
        )
        op.execute(f"INSERT INTO {_TMP} (stream, seq) SELECT DISTINCT stream, seq FROM event_keys")
        op.drop_table("event_keys")
        op.rename_table(_TMP, "event_keys")
        return
    op.execute(
        "DELETE FROM event_keys a USING event_keys b WHERE a.stream = b.stream AND a.seq = b.seq "
        "AND a.experiment_id > b.experiment_id"
    )
    op.drop_constraint("event_keys_pkey", "event_keys", type_="primary")
    op.drop_column("event_keys", "experiment_id")
    op.create_primary_key("event_keys_pkey", "event_keys", ["stream", "seq"])
