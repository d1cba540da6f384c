"""`phalanx admin user|project|member|audit`: a shared server's people, projects and roles, and
its audit trail (docs/teams.md). They work on the server's store directly (like `phalanx server`),
so they run where the server's PHALANX_HOME or PHALANX_STORE is; each change goes to the audit trail
as "cli:<login name>"."""

from __future__ import annotations

import getpass
import sys
import time
from typing import Annotated, Any

import typer

from phalanx.apiclient import quote
from phalanx.cli.app import app, emit_json
from phalanx.cli.target import LocalOpt, ServerOpt, ThisMachineOnlyOpt, this_machine_only

admin_app = typer.Typer(
    help="A shared server's users, projects, roles and audit trail.", no_args_is_help=True
)
user_app = typer.Typer(help="Local accounts: add, list, disable, enable.", no_args_is_help=True)
project_app = typer.Typer(help="Projects people are members of.", no_args_is_help=True)
member_app = typer.Typer(
    help="Who has which role (viewer, editor, admin) in a project.", no_args_is_help=True
)
app.add_typer(admin_app, name="admin")
admin_app.add_typer(user_app, name="user")
admin_app.add_typer(project_app, name="project")
admin_app.add_typer(member_app, name="member")

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON.")]
# what a command that changes the server's accounts says when given --server (it needs the store)
ON_THE_SERVERS_MACHINE = (
    "run it where the server's PHALANX_HOME is (docs/teams.md); a project's admins give roles from "
    "anywhere with `phalanx admin member add`"
)


def _accounts() -> Any:
    from phalanx.config import Settings
    from phalanx.store import open_store
    from phalanx.store.accounts import Accounts

    return Accounts(open_store(Settings()))


def _actor() -> str:
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):
        return "cli"


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
    server: ThisMachineOnlyOpt = None,
) -> None:
    """Add a user with a password (asked twice unless --password-stdin). The first --admin user
    turns the server into team mode: every route then checks roles, and the server token becomes
    that admin's."""
    this_machine_only("admin user add", server, ON_THE_SERVERS_MACHINE)
    if password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = typer.prompt("Password", hide_input=True, confirmation_prompt=True)
    accounts = _accounts()
    first = accounts.first_admin() is None and admin
    accounts.add_user(name, password, admin=admin)
    accounts.audit(_actor(), "user.add", name, detail="admin" if admin else None)
    typer.echo(f"user {name} added{' (server admin)' if admin else ''}")
    if first:
        typer.echo(
            "the server is now in team mode: every request needs a user's token or session (docs/teams.md)"
        )


@user_app.command("ls")
def user_ls(json_: JsonOpt = False, server: ThisMachineOnlyOpt = None) -> None:
    """Users, whether each is a server admin or disabled."""
    this_machine_only("admin user ls", server, ON_THE_SERVERS_MACHINE)
    users = _accounts().users()
    if json_:
        emit_json(
            [
                {"name": u.name, "admin": u.is_admin, "disabled": u.disabled, "created_at": u.created_at}
                for u in users
            ]
        )
        return
    rows = [
        [u.name, "yes" if u.is_admin else "", "disabled" if u.disabled else "", _when(u.created_at)]
        for u in users
    ]
    typer.echo(_table(["USER", "ADMIN", "STATE", "CREATED"], rows))


def _set_disabled(name: str, disabled: bool) -> None:
    accounts = _accounts()
    accounts.set_disabled(name, disabled)
    accounts.audit(_actor(), "user.disable" if disabled else "user.enable", name)
    typer.echo(f"user {name} {'disabled: its tokens and sessions are refused' if disabled else 'enabled'}")


@user_app.command("disable")
def user_disable(
    name: Annotated[str, typer.Argument(help="The user.")], server: ThisMachineOnlyOpt = None
) -> None:
    """Disable a user: their tokens and sessions are refused from the next request on."""
    this_machine_only("admin user disable", server, ON_THE_SERVERS_MACHINE)
    _set_disabled(name, True)


@user_app.command("enable")
def user_enable(
    name: Annotated[str, typer.Argument(help="The user.")], server: ThisMachineOnlyOpt = None
) -> None:
    """Enable a disabled user again."""
    this_machine_only("admin user enable", server, ON_THE_SERVERS_MACHINE)
    _set_disabled(name, False)


@project_app.command("add")
def project_add(
    name: Annotated[str, typer.Argument(help="The project's name (experiments' `project:`).")],
    server: ThisMachineOnlyOpt = None,
) -> None:
    """Add a project; experiments whose file says `project: NAME` belong to it."""
    this_machine_only("admin project add", server, ON_THE_SERVERS_MACHINE)
    accounts = _accounts()
    accounts.add_project(name)
    accounts.audit(_actor(), "project.add", name, project=name)
    typer.echo(
        f"project {name} added; give people roles with 'phalanx admin member add {name} USER --role editor'"
    )


@project_app.command("ls")
def project_ls(json_: JsonOpt = False, server: ThisMachineOnlyOpt = None) -> None:
    """Projects and their members."""
    this_machine_only("admin project ls", server, ON_THE_SERVERS_MACHINE)
    accounts = _accounts()
    doc = {p: {u: r.name for u, r in accounts.members(p).items()} for p in accounts.projects()}
    if json_:
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
    from phalanx.logins import choose
    from phalanx.store.accounts import Role

    parsed = Role.parse(role)
    client = choose(server, local)
    if client is not None:
        client.send("PUT", f"/projects/{quote(project)}/members/{quote(user)}", {"role": parsed.name})
    else:
        accounts = _accounts()
        accounts.set_member(project, user, parsed)
        accounts.audit(_actor(), "member.set", f"{project}/{user}", project=project, detail=parsed.name)
    typer.echo(f"{user} is now {parsed.name} of project {project}")


@member_app.command("rm")
def member_rm(
    project: Annotated[str, typer.Argument(help="The project.")],
    user: Annotated[str, typer.Argument(help="The user.")],
    server: ServerOpt = None,
    local: LocalOpt = False,
) -> None:
    """Take a user's role in a project away (after `phalanx login`, on the server)."""
    from phalanx.logins import choose

    client = choose(server, local)
    if client is not None:
        client.send("DELETE", f"/projects/{quote(project)}/members/{quote(user)}")
    else:
        accounts = _accounts()
        accounts.remove_member(project, user)
        accounts.audit(_actor(), "member.remove", f"{project}/{user}", project=project)
    typer.echo(f"{user} is no longer a member of project {project}")


@admin_app.command("audit")
def audit(
    limit: Annotated[
        int, typer.Option("--limit", "-n", min=1, max=10_000, help="How many of the newest.")
    ] = 50,
    project: Annotated[
        str | None, typer.Option("--project", "-p", help="Only this project's entries.")
    ] = None,
    json_: JsonOpt = False,
    server: ServerOpt = None,
    local: LocalOpt = False,
) -> None:
    """Who submitted, stopped, deleted, changed a role, and when: the newest entries, oldest first
    (after `phalanx login`, the server's trail: its admins only)."""
    from phalanx.logins import choose

    client = choose(server, local)
    if client is not None:
        records: list[dict[str, Any]] = client.get("/admin/audit", limit=limit, project=project)
    else:
        records = [vars(r) for r in _accounts().audit_trail(limit, project)]
    if json_:
        emit_json(records)
        return
    rows = [
        [_when(r["at"]), r["actor"], r["action"], r["target"], r["project"] or "-", r["detail"] or ""]
        for r in records
    ]
    typer.echo(_table(["WHEN", "WHO", "ACTION", "TARGET", "PROJECT", "DETAIL"], rows))
