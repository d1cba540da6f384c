"""Users' personal tokens, users and projects (the server's admins), members (a project's
admins), and the audit trail (docs/teams.md).

``POST /tokens`` exchanges a username and password for a personal token (what ``phalanx login``
calls); the token is in the answer once and kept only as its sha256."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, StrictBool

from phalanx.errors import UsageError
from phalanx.server.audit import describe
from phalanx.server.policy import policy, principal_of
from phalanx.store.accounts import Accounts, Role
from phalanx.store.directory import projects_json, user_json

router = APIRouter(tags=["teams"])


class TokenIn(BaseModel):
    username: str = Field(max_length=64)
    password: str = Field(max_length=1024)
    name: str = Field(min_length=1, max_length=100, description="what the token is for, e.g. 'laptop'")
    expires_days: float | None = Field(default=None, gt=0, le=3650, description="none: never expires")


class TokenOut(BaseModel):
    name: str
    created_at: float
    expires_at: float | None


class NewTokenOut(TokenOut):
    token: str = Field(description="shown this once; the server keeps only a hash of it")


class MeOut(BaseModel):
    user: str | None = Field(description="none: the server token")
    admin: bool
    projects: dict[str, str] = Field(description="project -> role (a server admin: every project)")


class MemberIn(BaseModel):
    role: str = Field(description="viewer, editor or admin")


class UserIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(max_length=64)
    password: str | None = Field(default=None, max_length=1024, description="none: single sign-on only")
    admin: StrictBool = Field(default=False, description="a server admin: every project, the audit trail")


class UserOut(BaseModel):
    name: str
    admin: bool
    disabled: bool
    created_at: float


class NewUserOut(UserOut):
    team_mode_started: bool = Field(description="this first admin turned the server to team mode")


class UserChange(BaseModel):
    model_config = ConfigDict(extra="forbid")

    disabled: StrictBool = Field(description="true: the user's tokens and sessions are refused from now on")


class ProjectIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(max_length=64)


class AuditOut(BaseModel):
    id: int
    at: float
    actor: str
    action: str
    target: str
    project: str | None
    detail: str | None


def _accounts(request: Request) -> Accounts:
    accounts: Accounts = request.app.state.accounts
    return accounts


def _own_user(request: Request) -> str:
    user = principal_of(request).user
    if user is None:
        raise UsageError("the server token is nobody's: personal tokens belong to users (docs/teams.md)")
    return user


@router.post("/tokens", response_model=NewTokenOut, status_code=201)
@policy("public")
def issue_token(body: TokenIn, request: Request) -> JSONResponse:
    """A new personal token for the user whose password this is (401 otherwise, throttled per
    address like the login form)."""
    accounts = _accounts(request)
    throttle = request.app.state.login_throttle
    client = request.client.host if request.client else "-"
    wait = throttle.retry_after(client)
    if wait:
        raise HTTPException(
            429, f"too many wrong passwords from {client}; try again in {wait} s", {"Retry-After": str(wait)}
        )
    user = accounts.authenticate(body.username, body.password)
    if user is None:
        throttle.failed(client)
        raise HTTPException(401, "wrong username or password")
    token, record = accounts.issue_token(user, body.name, body.expires_days)
    describe(request, "token.issue", f"{user}/{body.name}", actor=user)
    out = NewTokenOut(
        token=token, name=record.name, created_at=record.created_at, expires_at=record.expires_at
    )
    return JSONResponse(out.model_dump(), status_code=201, headers={"Cache-Control": "no-store"})


@router.get("/tokens", response_model=list[TokenOut])
@policy("signed-in")
def list_tokens(request: Request) -> list[TokenOut]:
    """The caller's own tokens (names and dates; never the tokens)."""
    records = _accounts(request).tokens(_own_user(request))
    return [TokenOut(name=r.name, created_at=r.created_at, expires_at=r.expires_at) for r in records]


@router.delete("/tokens/{name}", status_code=204)
@policy("signed-in")
def revoke_token(name: str, request: Request) -> Response:
    """Revoke one of the caller's tokens: refused from the next request on."""
    user = _own_user(request)
    _accounts(request).revoke_token(user, name)
    describe(request, "token.revoke", f"{user}/{name}")
    return Response(status_code=204)


@router.get("/me", response_model=MeOut)
@policy("signed-in")
def me(request: Request) -> MeOut:
    """Who the caller is and their projects."""
    who = principal_of(request)
    accounts = request.app.state.accounts
    if who.superuser:
        projects = {p: Role.admin.name for p in (accounts.projects() if accounts is not None else [])}
    else:
        projects = {p: r.name for p, r in who.roles.items()}
    return MeOut(user=who.user, admin=who.superuser, projects=projects)


@router.get("/admin/users", response_model=list[UserOut])
@policy("site:admin")
def list_users(request: Request) -> list[UserOut]:
    """Every user, whether a server admin or disabled (never a password)."""
    return [UserOut(**user_json(u)) for u in _accounts(request).users()]


@router.post("/admin/users", response_model=NewUserOut, status_code=201)
@policy("site:admin")
def add_user(body: UserIn, request: Request) -> NewUserOut:
    """Add a user, as `phalanx admin user add` where the server's home is. The first admin turns a
    single-token server to team mode (its token then acts as that admin)."""
    accounts = _accounts(request)
    accounts.add_user(body.name, body.password, admin=body.admin)
    first = body.admin and accounts.first_admin() == body.name  # once, however many raced it
    describe(request, "user.add", body.name, None, "admin" if body.admin else None)
    user = accounts.user(body.name)
    return NewUserOut(**user_json(user), team_mode_started=first)


@router.patch("/admin/users/{name}", response_model=UserOut)
@policy("site:admin")
def change_user(name: str, body: UserChange, request: Request) -> UserOut:
    """Disable a user (refused from their next request on) or enable them again."""
    accounts = _accounts(request)
    accounts.set_disabled(name, body.disabled)
    describe(request, "user.disable" if body.disabled else "user.enable", name)
    user = accounts.user(name)
    return UserOut(**user_json(user))


@router.get("/admin/projects")
@policy("site:admin")
def list_projects(request: Request) -> dict[str, dict[str, str]]:
    """Every project with its members' roles."""
    return projects_json(_accounts(request))


@router.post("/admin/projects", status_code=201)
@policy("site:admin")
def add_project(body: ProjectIn, request: Request) -> dict[str, str]:
    """Add a project; experiments whose file says `project: NAME` belong to it."""
    _accounts(request).add_project(body.name)
    describe(request, "project.add", body.name, body.name)
    return {"name": body.name}


@router.get("/projects/{project}/members")
@policy("project:viewer")
def list_members(project: str, request: Request) -> dict[str, str]:
    """The project's members and their roles."""
    return {u: r.name for u, r in _accounts(request).members(project).items()}


@router.put("/projects/{project}/members/{user}")
@policy("project:admin")
def set_member(project: str, user: str, body: MemberIn, request: Request) -> dict[str, str]:
    """Give a user a role in the project (or change it)."""
    role = Role.parse(body.role)
    accounts = _accounts(request)
    before = accounts.members(project).get(user)
    accounts.set_member(project, user, role)
    describe(
        request,
        "member.set",
        f"{project}/{user}",
        project,
        role.name,
        None if before is None else before.name,
    )
    return {u: r.name for u, r in accounts.members(project).items()}


@router.delete("/projects/{project}/members/{user}", status_code=204)
@policy("project:admin")
def remove_member(project: str, user: str, request: Request) -> Response:
    accounts = _accounts(request)
    before = accounts.members(project).get(user)
    accounts.remove_member(project, user)
    describe(
        request, "member.remove", f"{project}/{user}", project, None, None if before is None else before.name
    )
    return Response(status_code=204)


@router.get("/admin/audit", response_model=list[AuditOut])
@policy("site:admin")
def audit_trail(
    request: Request,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 100,
    project: Annotated[str | None, Query(max_length=255)] = None,
) -> list[AuditOut]:
    """The newest ``limit`` entries of the audit trail, oldest first (server admins only)."""
    return [AuditOut(**vars(r)) for r in _accounts(request).audit_trail(limit, project)]
