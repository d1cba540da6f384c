"""The teams tables (migration 0010_teams_accounts): users, personal tokens, projects, members,
the audit trail and who launched what. Plain functions over an engine; ``phalanx.store.accounts``
is the facade everything outside the store calls."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, delete, insert, select, update
from sqlalchemy.exc import IntegrityError

from phalanx.errors import Conflict
from phalanx.store.sql.engine import writer
from phalanx.store.sql.models import (
    AuditRow,
    ExperimentRow,
    LaunchRow,
    PersonalTokenRow,
    ProjectMemberRow,
    ProjectRow,
    UserRow,
)


@dataclass(frozen=True)
class UserRecord:
    name: str
    password_hash: str | None
    is_admin: bool
    disabled: bool
    created_at: float


@dataclass(frozen=True)
class TokenRecord:
    user: str
    name: str
    created_at: float
    expires_at: float | None


@dataclass(frozen=True)
class AuditRecord:
    id: int
    at: float
    actor: str
    action: str
    target: str
    project: str | None
    detail: str | None


def _user(row: Any) -> UserRecord:
    return UserRecord(
        str(row.name), row.password_hash, bool(row.is_admin), bool(row.disabled), float(row.created_at)
    )


def add_user(engine: Engine, name: str, password_hash: str | None, is_admin: bool) -> None:
    try:
        with writer(engine).begin() as conn:
            conn.execute(
                insert(UserRow).values(
                    name=name,
                    password_hash=password_hash,
                    is_admin=int(is_admin),
                    disabled=0,
                    created_at=time.time(),
                )
            )
    except IntegrityError as exc:
        raise Conflict(f"user {name!r} already exists; list them with 'phalanx admin user ls'") from exc


def get_user(engine: Engine, name: str) -> UserRecord | None:
    with engine.connect() as conn:
        row = conn.execute(select(UserRow).where(UserRow.c.name == name)).one_or_none()
    return None if row is None else _user(row)


def list_users(engine: Engine) -> list[UserRecord]:
    with engine.connect() as conn:
        return [_user(r) for r in conn.execute(select(UserRow).order_by(UserRow.c.name))]


def update_user(engine: Engine, name: str, **values: Any) -> bool:
    with writer(engine).begin() as conn:
        return bool(conn.execute(update(UserRow).where(UserRow.c.name == name).values(**values)).rowcount)


def first_admin(engine: Engine) -> str | None:
    """The first admin ever created (None: the server is still in single-token mode)."""
    with engine.connect() as conn:
        name = conn.execute(
            select(UserRow.c.name)
            .where(UserRow.c.is_admin == 1)
            .order_by(UserRow.c.created_at, UserRow.c.name)
            .limit(1)
        ).scalar_one_or_none()
    return None if name is None else str(name)


def add_token(engine: Engine, user: str, name: str, sha256: str, expires_at: float | None) -> TokenRecord:
    now = time.time()
    try:
        with writer(engine).begin() as conn:
            conn.execute(
                insert(PersonalTokenRow).values(
                    user=user, name=name, token_sha256=sha256, created_at=now, expires_at=expires_at
                )
            )
    except IntegrityError as exc:
        raise Conflict(
            f"{user} already has a token named {name!r}; revoke it first or choose another name"
        ) from exc
    return TokenRecord(user, name, now, expires_at)


# what is kept of a personal token (never the token: its sha256 only, and that is not shown either)
_TOKEN_COLUMNS = (
    PersonalTokenRow.c.user,
    PersonalTokenRow.c.name,
    PersonalTokenRow.c.created_at,
    PersonalTokenRow.c.expires_at,
)


def _token_record(row: Any) -> TokenRecord:
    return TokenRecord(str(row[0]), str(row[1]), float(row[2]), row[3])


def list_tokens(engine: Engine, user: str) -> list[TokenRecord]:
    with engine.connect() as conn:
        rows = conn.execute(
            select(*_TOKEN_COLUMNS).where(PersonalTokenRow.c.user == user).order_by(PersonalTokenRow.c.name)
        )
        return [_token_record(r) for r in rows]


def revoke_token(engine: Engine, user: str, name: str) -> bool:
    with writer(engine).begin() as conn:
        done = conn.execute(
            delete(PersonalTokenRow).where(PersonalTokenRow.c.user == user, PersonalTokenRow.c.name == name)
        )
        return bool(done.rowcount)


def user_of_token(engine: Engine, sha256: str, now: float) -> str | None:
    """The enabled user whose unexpired token has this hash."""
    with engine.connect() as conn:
        row = conn.execute(
            select(PersonalTokenRow.c.user, PersonalTokenRow.c.expires_at, UserRow.c.disabled)
            .join(UserRow, UserRow.c.name == PersonalTokenRow.c.user)
            .where(PersonalTokenRow.c.token_sha256 == sha256)
        ).one_or_none()
    if row is None or row[2] or (row[1] is not None and float(row[1]) <= now):
        return None
    return str(row[0])


def held_token(engine: Engine, sha256: str) -> TokenRecord | None:
    """The token with this hash, expired or not, its user enabled or not (why it was refused)."""
    with engine.connect() as conn:
        found = select(*_TOKEN_COLUMNS).where(PersonalTokenRow.c.token_sha256 == sha256)
        row = conn.execute(found).one_or_none()
    return None if row is None else _token_record(row)


def add_project(engine: Engine, name: str) -> None:
    try:
        with writer(engine).begin() as conn:
            conn.execute(insert(ProjectRow).values(name=name, created_at=time.time()))
    except IntegrityError as exc:
        raise Conflict(f"project {name!r} already exists; list them with 'phalanx admin project ls'") from exc


def list_projects(engine: Engine) -> list[str]:
    with engine.connect() as conn:
        return [str(n) for n in conn.execute(select(ProjectRow.c.name).order_by(ProjectRow.c.name)).scalars()]


def project_in_use(engine: Engine, project: str) -> bool:
    """Whether ``project`` has a record or holds an experiment (one index lookup each)."""
    with engine.connect() as conn:
        for column in (ProjectRow.c.name, ExperimentRow.c.project):
            if conn.execute(select(column).where(column == project).limit(1)).first() is not None:
                return True
    return False


def set_member(engine: Engine, project: str, user: str, role: str) -> None:
    with writer(engine).begin() as conn:
        conn.execute(
            delete(ProjectMemberRow).where(
                ProjectMemberRow.c.project == project, ProjectMemberRow.c.user == user
            )
        )
        conn.execute(insert(ProjectMemberRow).values(project=project, user=user, role=role))


def remove_member(engine: Engine, project: str, user: str) -> bool:
    with writer(engine).begin() as conn:
        done = conn.execute(
            delete(ProjectMemberRow).where(
                ProjectMemberRow.c.project == project, ProjectMemberRow.c.user == user
            )
        )
        return bool(done.rowcount)


def roles_of(engine: Engine, user: str) -> dict[str, str]:
    with engine.connect() as conn:
        rows = conn.execute(
            select(ProjectMemberRow.c.project, ProjectMemberRow.c.role).where(ProjectMemberRow.c.user == user)
        )
        return {str(p): str(r) for p, r in rows}


def members(engine: Engine, project: str) -> dict[str, str]:
    with engine.connect() as conn:
        rows = conn.execute(
            select(ProjectMemberRow.c.user, ProjectMemberRow.c.role)
            .where(ProjectMemberRow.c.project == project)
            .order_by(ProjectMemberRow.c.user)
        )
        return {str(u): str(r) for u, r in rows}


def add_audit(
    engine: Engine, actor: str, action: str, target: str, project: str | None, detail: str | None
) -> None:
    with writer(engine).begin() as conn:
        conn.execute(
            insert(AuditRow).values(
                at=time.time(), actor=actor, action=action, target=target, project=project, detail=detail
            )
        )


def list_audit(engine: Engine, limit: int, project: str | None = None) -> list[AuditRecord]:
    """The newest ``limit`` entries, oldest first."""
    query = select(AuditRow).order_by(AuditRow.c.id.desc()).limit(limit)
    if project is not None:
        query = query.where(AuditRow.c.project == project)
    with engine.connect() as conn:
        rows = list(conn.execute(query))
    return [
        AuditRecord(int(r.id), float(r.at), r.actor, r.action, r.target, r.project, r.detail)
        for r in reversed(rows)
    ]


def record_launch(engine: Engine, kind: str, object_id: str, user: str) -> None:
    with writer(engine).begin() as conn:
        conn.execute(delete(LaunchRow).where(LaunchRow.c.kind == kind, LaunchRow.c.object_id == object_id))
        conn.execute(insert(LaunchRow).values(kind=kind, object_id=object_id, user=user, at=time.time()))


def launched_by(engine: Engine, kind: str, object_id: str) -> str | None:
    with engine.connect() as conn:
        user = conn.execute(
            select(LaunchRow.c.user).where(LaunchRow.c.kind == kind, LaunchRow.c.object_id == object_id)
        ).scalar_one_or_none()
    return None if user is None else str(user)
