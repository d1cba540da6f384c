"""A door to a team's people and projects (`phalanx admin user|project|member|audit`): this
machine's store (``LocalDirectory``, where the server's PHALANX_HOME is) or a server's API
(``remote_store.RemoteDirectory``: its admins, from anywhere after `phalanx login`). Every change
goes to the audit trail: here as the shell's login (``cli:NAME``), there as the caller."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from phalanx.store.accounts import Accounts, Role

if TYPE_CHECKING:
    from phalanx.store.base import LocalStore
    from phalanx.store.sql.accounts import UserRecord


class Directory(Protocol):
    def add_user(self, name: str, password: str | None, admin: bool = False) -> bool:
        """Add a user (``password`` None: signs in through single sign-on only). Returns whether
        this first admin turned the server to team mode. UsageError for a bad name, Conflict for
        a taken one."""
        ...

    def users(self) -> list[dict[str, Any]]:
        """Every user: ``name``, ``admin``, ``disabled``, ``created_at``. Never a password."""
        ...

    def set_disabled(self, name: str, disabled: bool) -> None:
        """Disable a user (their tokens and sessions are refused from the next request on), or
        enable them again. NotFound for an unknown user."""
        ...

    def add_project(self, name: str) -> None:
        """Add a project. UsageError for a bad name, Conflict for a taken one."""
        ...

    def projects(self) -> dict[str, dict[str, str]]:
        """project -> {user: role} of every project."""
        ...

    def set_member(self, project: str, user: str, role: Role) -> None:
        """Give ``user`` ``role`` in ``project`` (or change it). NotFound for an unknown one."""
        ...

    def remove_member(self, project: str, user: str) -> None:
        """Take ``user``'s role in ``project`` away. NotFound when they have none."""
        ...

    def audit_trail(self, limit: int = 100, project: str | None = None) -> list[dict[str, Any]]:
        """The newest ``limit`` entries (of ``project``'s), oldest first: ``id``, ``at``,
        ``actor``, ``action``, ``target``, ``project``, ``detail``."""
        ...


class LocalDirectory:
    """The people and projects of this machine's store; ``actor`` names who changes them in the
    audit trail."""

    def __init__(self, store: LocalStore, actor: str) -> None:
        self.accounts = Accounts(store)
        self.actor = actor

    def add_user(self, name: str, password: str | None, admin: bool = False) -> bool:
        self.accounts.add_user(name, password, admin=admin)
        first = admin and self.accounts.first_admin() == name
        self.accounts.audit(self.actor, "user.add", name, detail="admin" if admin else None)
        return first

    def users(self) -> list[dict[str, Any]]:
        return [user_json(u) for u in self.accounts.users()]

    def set_disabled(self, name: str, disabled: bool) -> None:
        self.accounts.set_disabled(name, disabled)
        self.accounts.audit(self.actor, "user.disable" if disabled else "user.enable", name)

    def add_project(self, name: str) -> None:
        self.accounts.add_project(name)
        self.accounts.audit(self.actor, "project.add", name, project=name)

    def projects(self) -> dict[str, dict[str, str]]:
        return projects_json(self.accounts)

    def set_member(self, project: str, user: str, role: Role) -> None:
        self.accounts.set_member(project, user, role)
        self.accounts.audit(self.actor, "member.set", f"{project}/{user}", project=project, detail=role.name)

    def remove_member(self, project: str, user: str) -> None:
        self.accounts.remove_member(project, user)
        self.accounts.audit(self.actor, "member.remove", f"{project}/{user}", project=project)

    def audit_trail(self, limit: int = 100, project: str | None = None) -> list[dict[str, Any]]:
        return [vars(r) for r in self.accounts.audit_trail(limit, project)]


def user_json(user: UserRecord) -> dict[str, Any]:
    """A user as `admin user ls --json` and ``GET /admin/users`` show it: never its password."""
    return {
        "name": user.name,
        "admin": user.is_admin,
        "disabled": user.disabled,
        "created_at": user.created_at,
    }


def projects_json(accounts: Accounts) -> dict[str, dict[str, str]]:
    """Every project with its members' roles (`admin project ls --json`, ``GET /admin/projects``)."""
    return {p: {u: r.name for u, r in accounts.members(p).items()} for p in accounts.projects()}
