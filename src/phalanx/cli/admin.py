"""`phalanx admin user|project|member|audit`: a shared server's people, projects and roles, and
its audit trail (docs/teams.md), through one door (``store.directory.Directory``): after `phalanx
login` (or with --server) the server's API, as its admins (a project's admins for its members);
else this machine's store, where the server's PHALANX_HOME is, each change audited as
"cli:<login name>"."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Annotated

import typer

from phalanx.cli.app import OutputOpt, app
from phalanx.cli.listing import Format, emit_json
from phalanx.cli.target import DoorTyper, LocalOpt, ServerOpt, shell_actor

if TYPE_CHECKING:
    from phalanx.store.directory import Directory

admin_app = DoorTyper(help="A shared server's users, projects, roles and audit trail.", no_args_is_help=True)
user_app = DoorTyper(help="Local accounts: add, list, disable, enable.", no_args_is_help=True)
project_app = DoorTyper(help="Projects people are members of.", no_args_is_help=True)
member_app = DoorTyper(help="Who has which role (viewer, editor, admin) in a project.", no_args_is_help=True)
app.add_typer(admin_app, name="admin")
admin_app.add_typer(user_app, name="user")
admin_app.add_typer(project_app, name="project")
admin_app.add_typer(member_app, name="member")

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON (as -o json).")]


def _door(server: str | None, local: bool) -> Directory:
    """The people and projects the command acts on: the server's (after `phalanx login`, or with
    --server), else this machine's store."""
    from phalanx.logins import choose

    client = choose(server, local)
    if client is not None:
        from phalanx.remote_store import RemoteDirectory

        return RemoteDirectory(client)
    from phalanx.config import Settings
    from phalanx.store import open_store
    from phalanx.store.directory import LocalDirectory

    return LocalDirectory(open_store(Settings()), shell_actor())


def _when(at: float | None) -> str:
    return "-" if at is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [header, *rows]
    )


@user_app.command("add")
def user_add(
    name: Annotated[str, typer.Argument(help="The user's name, e.g. 'ada'.")],
    admin: Annotated[
        bool, typer.Option("--admin", help="A server admin: every project, the audit trail.")
    ] = False,
    password_stdin: Annotated[
        bool,
        typer.Option("--password-stdin", help="Read the password from the first line of stdin (scripts)."),
    ] = False,
    server: ServerOpt = None,
    local: LocalOpt = False,
) -> None:
    """Add a user with a password (asked twice unless --password-stdin). The first --admin user
    turns the server into team mode: every route then checks roles, and the server token becomes
    that admin's. After `phalanx login`, on the server (its admins)."""
    from phalanx.errors import UsageError
    from phalanx.store.accounts import check_name

    check_name("user", name)  # before a password is asked for a name that cannot be
    directory = _door(server, local)
    if password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    elif sys.stdin is None or sys.stdin.closed or not sys.stdin.isatty():
        raise UsageError(
            f"no terminal to ask {name}'s password on: pipe it in with --password-stdin"
            f" (`phalanx admin user add {name} --password-stdin < password.txt`, its first line)"
        )
    else:
        password = typer.prompt("Password", hide_input=True, confirmation_prompt=True)
    if not password:
        raise UsageError(f"an empty password for {name}: give one (nothing was added)")
    first = directory.add_user(name, password, admin=admin)
    typer.echo(f"user {name} added{' (server admin)' if admin else ''}")
    if first:
        typer.echo(
            "the server is now in team mode: every request needs a user's token or session (docs/teams.md)"
        )


@user_app.command("ls")
def user_ls(
    output: OutputOpt = Format.TABLE,
    json_: JsonOpt = False,
    server: ServerOpt = None,
    local: LocalOpt = False,
) -> None:
    """Users, whether each is a server admin or disabled."""
    users = _door(server, local).users()
    if json_ or output is Format.JSON:
        emit_json(users)
        return
    rows = [
        [u["name"], "yes" if u["admin"] else "", "disabled" if u["disabled"] else "", _when(u["created_at"])]
        for u in users
    ]
    typer.echo(_table(["USER", "ADMIN", "STATE", "CREATED"], rows))


def _set_disabled(directory: Directory, name: str, disabled: bool) -> None:
    directory.set_disabled(name, disabled)
    typer.echo(f"user {name} {'disabled: its tokens and sessions are refused' if disabled else 'enabled'}")


@user_app.command("disable")
def user_disable(
    name: Annotated[str, typer.Argument(help="The user.")], server: ServerOpt = None, local: LocalOpt = False
) -> None:
    """Disable a user: their tokens and sessions are refused from the next request on."""
    _set_disabled(_door(server, local), name, True)


@user_app.command("enable")
def user_enable(
    name: Annotated[str, typer.Argument(help="The user.")], server: ServerOpt = None, local: LocalOpt = False
) -> None:
    """Enable a disabled user again."""
    _set_disabled(_door(server, local), name, False)


@project_app.command("add")
def project_add(
    name: Annotated[str, typer.Argument(help="The project's name (experiments' `project:`).")],
    server: ServerOpt = None,
    local: LocalOpt = False,
) -> None:
    """Add a project; experiments whose file says `project: NAME` belong to it."""
    _door(server, local).add_project(name)
    typer.echo(
        f"project {name} added; give people roles with 'phalanx admin member add {name} USER --role editor'"
    )


@project_app.command("ls")
def project_ls(
    output: OutputOpt = Format.TABLE,
    json_: JsonOpt = False,
    server: ServerOpt = None,
    local: LocalOpt = False,
) -> None:
    """Projects and their members."""
    doc = _door(server, local).projects()
    if json_ or output is Format.JSON:
        emit_json(doc)
        return
    rows = [[p, ", ".join(f"{u} ({r})" for u, r in m.items()) or "-"] for p, m in doc.items()]
    typer.echo(_table(["PROJECT", "MEMBERS"], rows))


@member_app.command("add")
def member_add(
    project: Annotated[str, typer.Argument(help="The project.")],
    user: Annotated[str, typer.Argument(help="The user.")],
    role: Annotated[str, typer.Option("--role", help="viewer, editor or admin.")] = "viewer",
    server: ServerOpt = None,
    local: LocalOpt = False,
) -> None:
    """Give a user a role in a project (or change it). After `phalanx login`, on the server (the
    project's admins), which writes the audit entry as the caller."""
    from phalanx.store.accounts import Role  # why: the parse only (its module imports SQLAlchemy)

    parsed = Role.parse(role)
    _door(server, local).set_member(project, user, parsed)
    typer.echo(f"{user} is now {parsed.name} of project {project}")


@member_app.command("rm")
def member_rm(
    project: Annotated[str, typer.Argument(help="The project.")],
    user: Annotated[str, typer.Argument(help="The user.")],
    server: ServerOpt = None,
    local: LocalOpt = False,
) -> None:
    """Take a user's role in a project away (after `phalanx login`, on the server)."""
    _door(server, local).remove_member(project, user)
    typer.echo(f"{user} is no longer a member of project {project}")


@admin_app.command("audit")
def audit(
    limit: Annotated[
        int, typer.Option("--limit", "-n", min=1, max=10_000, help="How many of the newest.")
    ] = 50,
    project: Annotated[
        str | None, typer.Option("--project", "-p", help="Only this project's entries.")
    ] = None,
    output: OutputOpt = Format.TABLE,
    json_: JsonOpt = False,
    server: ServerOpt = None,
    local: LocalOpt = False,
) -> None:
    """Who submitted, stopped, deleted, changed a role, and when: the newest entries, oldest first
    (after `phalanx login`, the server's trail: its admins only)."""
    records = _door(server, local).audit_trail(limit, project)
    if json_ or output is Format.JSON:
        emit_json(records)
        return
    rows = [
        [_when(r["at"]), r["actor"], r["action"], r["target"], r["project"] or "-", r["detail"] or ""]
        for r in records
    ]
    typer.echo(_table(["WHEN", "WHO", "ACTION", "TARGET", "PROJECT", "DETAIL"], rows))
