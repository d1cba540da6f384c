"""teams: users, personal tokens, projects and their members, the audit trail, who launched what

Revision ID: 0010_teams_accounts
Revises: 0009_srvsubmit_submissions
Create Date: 2026-11-26 13:45:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010_teams_accounts"
down_revision = "0009_srvsubmit_submissions"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "users",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("password_hash", sa.Text(), nullable=True),
        sa.Column("is_admin", sa.Integer(), nullable=False),
        sa.Column("disabled", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_table(
        "personal_tokens",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("user", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("token_sha256", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(["user"], ["users.name"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("token_sha256"),
        sa.UniqueConstraint("user", "name", name="uq_personal_tokens_user_name"),
    )
    op.create_table(
        "projects",
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_table(
        "project_members",
        sa.Column("project", sa.String(length=255), nullable=False),
        sa.Column("user", sa.String(length=64), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.ForeignKeyConstraint(["project"], ["projects.name"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["user"], ["users.name"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("project", "user"),
    )
    op.create_table(
        "audit_events",
        sa.Column(
            "id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False
        ),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("actor", sa.String(length=64), nullable=False),
        sa.Column("action", sa.String(length=64), nullable=False),
        sa.Column("target", sa.String(length=255), nullable=False),
        sa.Column("project", sa.String(length=255), nullable=True),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_audit_events_at", "audit_events", ["at"])
    op.create_table(
        "launches",
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("object_id", sa.String(length=32), nullable=False),
        sa.Column("user", sa.String(length=64), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("kind", "object_id"),
    )


def downgrade() -> None:
    op.drop_table("launches")
    op.drop_index("ix_audit_events_at", table_name="audit_events")
    op.drop_table("audit_events")
    op.drop_table("project_members")
    op.drop_table("projects")
    op.drop_table("personal_tokens")
    op.drop_table("users")
