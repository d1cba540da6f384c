"""People on a shared server: users with hashed passwords, personal tokens, projects with members
in a role, the audit trail, and who launched an experiment or group (docs/teams.md).

Passwords are hashed with argon2 (pwdlib); personal tokens are 256 random bits shown once and kept
as their sha256, so neither the database file nor a log line ever holds one in clear. The server is
in *single-token mode* until the first admin user exists: then every route checks roles.
Implemented by the SQL store's tables (``sql.accounts``); callers outside ``phalanx.store`` use
this facade, never the engine.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import time
from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine

from phalanx.errors import Conflict, NotFound, UsageError, account_disabled
from phalanx.extras import require
from phalanx.share import DEFAULT_PROJECT
from phalanx.store.sql import accounts
from phalanx.store.sql.engine import CommitWatch
from phalanx.suggest import did_you_mean

if TYPE_CHECKING:
    from phalanx.store.base import LocalStore
    from phalanx.store.sql.accounts import AuditRecord, TokenRecord, UserRecord

TOKEN_PREFIX = "phx_"
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")
MIN_PASSWORD = 8


class Role(IntEnum):
    """A member's role in a project; each includes the ones below it."""

    viewer = 1  # read everything of the project
    editor = 2  # submit, stop, tag, rerun its experiments
    admin = 3  # members, quotas, delete

    @classmethod
    def parse(cls, text: str) -> Role:
        try:
            return cls[text.strip().lower()]
        except KeyError:
            raise UsageError(f"unknown role {text!r}: use viewer, editor or admin") from None


def token_sha256(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _hasher() -> Any:
    pwdlib = require("pwdlib", "teams", "a user's password")
    return pwdlib.PasswordHash.recommended()


def hash_password(password: str) -> str:
    if len(password) < MIN_PASSWORD or not password.strip():
        raise UsageError(f"a password needs at least {MIN_PASSWORD} characters, not all of them spaces")
    return str(_hasher().hash(password))


def check_name(kind: str, name: str) -> str:
    if not NAME.fullmatch(name):
        raise UsageError(
            f"invalid {kind} name {name!r}: letters, digits, '.', '_', '@' and '-', at most 64, "
            "starting with a letter or digit"
        )
    return name


def check_project(store: LocalStore, project: str, *, from_file: bool = False) -> None:
    """NotFound, before anything is written, for a project a team server does not know: what a
    submit, secret, quota, datastore or dataset names (a typo such as `visoin` would otherwise make
    one that nobody ever uses), or a secret's or quota's removal that found nothing to remove.

    On a team server's store (an admin user exists) a project is a record (`phalanx admin project
    add`, a server admin's); one that holds experiments counts too (runs from before the server had
    teams, e.g. in `default`). On a single-user machine's store, or a single-token server's,
    projects are labels: nothing is checked.
    Over HTTP only a caller who sees every project gets here with an unknown name (the route's policy
    answers the others as for a project they are not a member of), so naming the projects is no leak.
    ``from_file``: the project is a run's file's (`default` when it names none).
    """
    engine = store.engine
    if accounts.first_admin(engine) is None or accounts.project_in_use(engine, project):
        return
    unnamed = (  # `default` is what a file that names no project runs in
        "; or name a project in the file (`project: NAME`)"
        if from_file and project == DEFAULT_PROJECT
        else ""
    )
    raise NotFound(
        f"no project {project!r} on this server{did_you_mean(project, accounts.list_projects(engine))}"
        f" (a server admin creates it with `phalanx admin project add {project}`;"
        f" `phalanx admin project ls` lists them{unnamed})"
    )


@dataclass(frozen=True)
class RefusedToken:
    """A personal token the server knows but did not accept, and why."""

    user: str
    disabled: bool  # its user's account is disabled
    expired_at: float | None  # when it expired; None when it has not


class Accounts:
    """The teams tables of one store."""

    def __init__(self, store: LocalStore) -> None:
        self._engine: Engine = store.engine
        self._commits = CommitWatch(self._engine)
        self._no_admin_at: int | None = None  # the commit count when the store last had no admin

    def close(self) -> None:
        """Close what ``first_admin`` keeps open (its commit watch's connection)."""
        self._commits.close()

    @property
    def over_network(self) -> bool:
        """Whether a question costs a round trip to a database server (PostgreSQL), not a read of a
        local file (SQLite): the server asks it off its event loop then."""
        return self._engine.dialect.name != "sqlite"

    # -- users -------------------------------------------------------------------------------------
    def add_user(self, name: str, password: str | None, admin: bool = False) -> None:
        """``password`` None: the user signs in through single sign-on only (an empty one is refused)."""
        check_name("user", name)
        twin = next((u.name for u in self.users() if u.name.lower() == name.lower()), None)
        if twin is not None:  # `root` and `ROOT` would be told apart by case alone in the trail
            raise Conflict(f"user {twin!r} already exists; a name differing only in case is refused")
        accounts.add_user(
            self._engine, name, hash_password(password) if password is not None else None, admin
        )

    def user(self, name: str) -> UserRecord:
        found = accounts.get_user(self._engine, name)
        if found is None:
            raise NotFound(f"no user {name!r}; list them with 'phalanx admin user ls'")
        return found

    def users(self) -> list[UserRecord]:
        return accounts.list_users(self._engine)

    def set_disabled(self, name: str, disabled: bool) -> None:
        """UsageError for the last enabled server admin: disabling them would lock every admin out
        (the server token acts as the first admin)."""
        others = [u for u in self.users() if u.is_admin and not u.disabled and u.name != name]
        if disabled and self.user(name).is_admin and not others:
            raise UsageError(
                f"{name} is the server's last enabled admin: disabling them would lock every admin out;"
                " make another admin first (`phalanx admin user add NAME --admin`)"
            )
        if not accounts.update_user(self._engine, name, disabled=int(disabled)):
            raise NotFound(f"no user {name!r}; list them with 'phalanx admin user ls'")

    def set_password(self, name: str, password: str) -> None:
        if not accounts.update_user(self._engine, name, password_hash=hash_password(password)):
            raise NotFound(f"no user {name!r}; list them with 'phalanx admin user ls'")

    def authenticate(self, name: str, password: str) -> str | None:
        """The user's name when the password is right and the account enabled; None for a wrong
        name or password; AccountDisabled when the password is right but the account disabled
        (only the password's owner learns that). A wrong name costs the same hashing time as a
        wrong password (no user enumeration by timing)."""
        found = accounts.get_user(self._engine, name) if NAME.fullmatch(name) else None
        hasher = _hasher()
        if found is None or found.password_hash is None:
            hasher.verify(password, _DUMMY_HASH.get(hasher))
            return None
        if not hasher.verify(password, found.password_hash):
            return None
        if found.disabled:
            raise account_disabled(found.name)
        return found.name

    def first_admin(self) -> str | None:
        """None while the server is in single-token mode (no admin user yet). A server asks on every
        request; on SQLite a "no admin" answer is reused while nothing at all was committed since
        (``CommitWatch``), so the first admin added by any process counts from the next request."""
        seen = self._commits.count()  # taken before the query: a commit racing it changes the count
        if seen is not None and seen == self._no_admin_at:
            return None
        found = accounts.first_admin(self._engine)
        self._no_admin_at = seen if found is None else None
        return found

    # -- personal tokens ---------------------------------------------------------------------------
    def issue_token(self, user: str, name: str, expires_days: float | None) -> tuple[str, TokenRecord]:
        """A new token (the only time it exists in clear) and what is kept of it."""
        if not name or len(name) > 100:
            raise UsageError("a token needs a name of 1 to 100 characters")
        if expires_days is not None and not 0 < expires_days <= 3650:
            raise UsageError(f"expires_days must be between 0 and 3650 (got {expires_days})")
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        expires = None if expires_days is None else time.time() + expires_days * 86400
        return token, accounts.add_token(self._engine, user, name, token_sha256(token), expires)

    def tokens(self, user: str) -> list[TokenRecord]:
        return accounts.list_tokens(self._engine, user)

    def revoke_token(self, user: str, name: str) -> None:
        if not accounts.revoke_token(self._engine, user, name):
            raise NotFound(f"{user} has no token named {name!r}")

    def user_of_token(self, token: str) -> str | None:
        if not token.startswith(TOKEN_PREFIX):
            return None
        return accounts.user_of_token(self._engine, token_sha256(token), time.time())

    def refused_token(self, token: str) -> RefusedToken | None:
        """Why a token that was not accepted was refused, as far as the store knows (an expired one,
        a disabled user's); None for one never issued, or revoked (a revoked token's row is gone)."""
        if not token.startswith(TOKEN_PREFIX):
            return None
        held = accounts.held_token(self._engine, token_sha256(token))
        if held is None:
            return None
        user = accounts.get_user(self._engine, held.user)
        ends = held.expires_at
        expired_at = float(ends) if ends is not None and float(ends) <= time.time() else None
        return RefusedToken(held.user, user is None or user.disabled, expired_at)

    # -- projects ----------------------------------------------------------------------------------
    def add_project(self, name: str) -> None:
        check_name("project", name)
        accounts.add_project(self._engine, name)

    def projects(self) -> list[str]:
        return accounts.list_projects(self._engine)

    def set_member(self, project: str, user: str, role: Role) -> None:
        if project not in self.projects():
            raise NotFound(f"no project {project!r}; create it with 'phalanx admin project add {project}'")
        self.user(user)
        accounts.set_member(self._engine, project, user, role.name)

    def remove_member(self, project: str, user: str) -> None:
        if not accounts.remove_member(self._engine, project, user):
            raise NotFound(f"{user} is not a member of project {project!r}")

    def roles_of(self, user: str) -> dict[str, Role]:
        return {p: Role[r] for p, r in accounts.roles_of(self._engine, user).items() if r in Role.__members__}

    def members(self, project: str) -> dict[str, Role]:
        return {
            u: Role[r] for u, r in accounts.members(self._engine, project).items() if r in Role.__members__
        }

    # -- audit trail and launches ------------------------------------------------------------------
    def audit(
        self, actor: str, action: str, target: str, project: str | None = None, detail: str | None = None
    ) -> None:
        accounts.add_audit(self._engine, actor, action, target[:255], project, detail)

    def audit_trail(self, limit: int = 100, project: str | None = None) -> list[AuditRecord]:
        return accounts.list_audit(self._engine, limit, project)

    def record_launch(self, kind: str, object_id: str, user: str) -> None:
        accounts.record_launch(self._engine, kind, object_id, user)

    def launched_by(self, kind: str, object_id: str) -> str | None:
        return accounts.launched_by(self._engine, kind, object_id)


class _DummyHash:
    """A hash of a random password, made once, to verify against when the user does not exist."""

    _value: str | None = None

    def get(self, hasher: Any) -> str:
        if self._value is None:
            self._value = str(hasher.hash(secrets.token_urlsafe(16)))
        return self._value


_DUMMY_HASH = _DummyHash()
