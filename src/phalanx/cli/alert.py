"""`phalanx alert add|ls|rm|deliveries`: a project's webhooks on a Phalanx server, told when its
experiments fail, succeed or are stopped, and when its groups finish (docs/alerts.md). The server
sends them, so these commands act on a server only (`phalanx login URL`, or --server URL); on this
machine alone, PHALANX_ALERT_URL / PHALANX_ALERT_COMMAND tell of stalls and hangs
(docs/configuration.md)."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Annotated

import typer

from phalanx.cli.app import OutputOpt, app
from phalanx.cli.listing import Format, _table, emit_json
from phalanx.cli.target import DoorTyper, ServerOpt
from phalanx.errors import UsageError
from phalanx.logins import choose

if TYPE_CHECKING:
    from phalanx.store.alerts import AlertBook

alert_app = DoorTyper(
    help="A project's webhooks on a Phalanx server: told when its experiments fail, succeed or stop,"
    " and when its groups finish.",
    no_args_is_help=True,
)
app.add_typer(alert_app, name="alert")

HookArg = Annotated[str, typer.Argument(help="the hook's id (`phalanx alert ls` lists them)")]


def _book(server: str | None) -> AlertBook:
    """The server's hooks; exit 2 when no server is in play (this machine sends no webhooks)."""
    from phalanx.remote_store import RemoteAlerts  # why: `phalanx --help` stays fast (no urllib)

    client = choose(server, False, local_option=None)
    if client is None:
        raise UsageError(
            "`phalanx alert` manages a Phalanx server's webhooks (the server sends them): "
            "`phalanx login URL` first, or give --server URL. On this machine alone, "
            "PHALANX_ALERT_URL tells a webhook of stalled and hung replicas (docs/alerts.md)"
        )
    return RemoteAlerts(client)


def _when(at: float | None) -> str:
    return "-" if at is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))


def _secret_from(variable: str | None) -> str | None:
    if variable is None:
        return None
    value = os.environ.get(variable)
    if not value:
        raise UsageError(f"--secret-from-env {variable}: the variable is not set (or empty) in this shell")
    return value


@alert_app.command("add")
def add(
    project: Annotated[str, typer.Option("--project", help="whose experiments and groups it is told about")],
    url: Annotated[str, typer.Option("--url", help="the receiver: an http:// or https:// address")],
    on: Annotated[
        str,
        typer.Option(
            "--on",
            help="the events it is told about, comma-separated: an experiment's end (failed, succeeded,"
            " stopped; or experiment.failed ...), a stalled replica (stalled), a straggling rank"
            " (straggling), a long wait in the queue (waiting), a group's end"
            " (group.finished), a model alias moved (model.alias)",
        ),
    ] = "failed",
    secret_from_env: Annotated[
        str | None,
        typer.Option(
            "--secret-from-env",
            metavar="VAR",
            help="sign with the secret in $VAR (16-256 characters); else the server makes one, shown once",
        ),
    ] = None,
    output: OutputOpt = Format.TABLE,
    server: ServerOpt = None,
) -> None:
    """Add a webhook: each event of the project named by --on (an experiment's end, a group's) is
    POSTed to URL as JSON, signed (X-Phalanx-Signature: sha256=HMAC of the body)."""
    secret = _secret_from(secret_from_env)
    hook = _book(server).add_hook(project, url, on.split(","), secret, None)
    if output is Format.JSON:
        emit_json(hook.to_json() | ({"secret": None} if secret is not None else {}))
        return
    typer.echo(f"alert hook {hook.id}: {', '.join(hook.events)} of project {hook.project} -> {hook.url}")
    if secret is None:
        typer.echo(f"its secret (shown once; the receiver checks signatures with it): {hook.secret}")


@alert_app.command("ls")
def ls(
    project: Annotated[str | None, typer.Option("--project", help="only this project's")] = None,
    output: OutputOpt = Format.TABLE,
    server: ServerOpt = None,
) -> None:
    """List the hooks of your projects (a viewer sees each URL's host only)."""
    hooks = _book(server).hooks(None if project is None else [project])
    if output is Format.JSON:
        emit_json([h.to_json() for h in hooks])
        return
    if not hooks:
        typer.echo("no alert hooks (`phalanx alert add --project P --url URL --on failed`)")
        return
    rows = [[h.id, h.project, ",".join(h.events), h.url, _when(h.created_at)] for h in hooks]
    typer.echo(_table(["id", "project", "on", "url", "added"], rows))


@alert_app.command("rm")
def rm(hook_id: HookArg, server: ServerOpt = None) -> None:
    """Remove a hook; what it had not been delivered yet is never sent."""
    book = _book(server)
    book.remove_hook(hook_id)
    typer.echo(f"alert hook {hook_id} removed")


@alert_app.command("deliveries")
def deliveries(
    hook_id: HookArg,
    limit: Annotated[int, typer.Option("--limit", min=1, max=500, help="the newest N")] = 20,
    output: OutputOpt = Format.TABLE,
    server: ServerOpt = None,
) -> None:
    """What was sent to a hook, newest first: each delivery's state and its tries."""
    found = _book(server).deliveries(hook_id, limit)
    if output is Format.JSON:
        emit_json([d.to_json() for d in found])
        return
    if not found:
        typer.echo(f"nothing sent to alert hook {hook_id} yet")
        return
    rows = []
    for d in found:
        last = d.attempts[-1] if d.attempts else None
        answer = "-" if last is None else str(last.status_code or last.error or "-")
        about = d.about
        rows.append([d.id, d.event, about, d.state, str(len(d.attempts)), answer, _when(d.created_at)])
    typer.echo(_table(["delivery", "event", "about", "state", "tries", "last answer", "at"], rows))
