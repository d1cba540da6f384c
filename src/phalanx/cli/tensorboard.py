"""`phalanx tensorboard start|ls|stop`: TensorBoard over what Phalanx recorded, for an experiment, a
group's trials or a project (docs/services.md).

On a server (`phalanx login URL`, or --server URL) `start` asks the server for the target's
TensorBoard, which runs boxed as a service and answers at ``URL/services/ID/`` to the project's
members (the one that runs is handed back when asked again; it stops when idle). On this machine
alone it runs in the foreground on a loopback port until Ctrl-C; `ls` and `stop` are a server's.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated, Any

import typer

from phalanx.cli.app import app, emit_json
from phalanx.cli.listing import Format, _table
from phalanx.cli.target import LocalOpt, ServerOpt
from phalanx.errors import NotFound, UsageError
from phalanx.logins import choose

if TYPE_CHECKING:
    from phalanx.remote_store import RemoteServices

tensorboard_app = typer.Typer(
    help="TensorBoard over what Phalanx recorded: of an experiment, a group's trials or a project.",
    no_args_is_help=True,
)
app.add_typer(tensorboard_app, name="tensorboard")

OutputOpt = Annotated[Format, typer.Option("-o", "--output", help="table or json")]


def _services(server: str | None, command: str) -> RemoteServices:
    from phalanx.remote_store import RemoteServices  # why: `phalanx --help` stays fast (no urllib)

    client = choose(server, False, local_option=None)
    if client is None:
        raise UsageError(
            f"`phalanx tensorboard {command}` lists or stops a server's TensorBoards: `phalanx login URL`"
            " first, or give --server URL. On this machine, `phalanx tensorboard start` runs one in the"
            " foreground (Ctrl-C stops it)"
        )
    return RemoteServices(client)


def _target(experiment: str | None, group: str | None, project: str | None) -> tuple[str, str]:
    given = [(k, v) for k, v in (("experiment", experiment), ("group", group), ("project", project)) if v]
    if len(given) != 1:
        raise UsageError(
            "name one target: an experiment id (`phalanx tensorboard start ID`), --group ID or --project NAME"
        )
    return given[0]


@tensorboard_app.command("start")
def start(
    experiment: Annotated[str | None, typer.Argument(help="an experiment's id (or a unique prefix)")] = None,
    group: Annotated[
        str | None, typer.Option("--group", help="a group's id: every trial, one run each")
    ] = None,
    project: Annotated[
        str | None, typer.Option("--project", help="a project: its newest experiments, one run each")
    ] = None,
    port: Annotated[int, typer.Option("--port", help="this machine alone: the loopback port")] = 6006,
    output: OutputOpt = Format.TABLE,
    server: ServerOpt = None,
    local: LocalOpt = False,
) -> None:
    """Start TensorBoard for an experiment, a group or a project (on a server: or get the one that
    runs) and print where it answers."""
    kind, target = _target(experiment, group, project)
    client = choose(server, local)
    if client is None:
        _start_here(kind, target, port)
        return
    from phalanx.remote_store import RemoteServices  # why: `phalanx --help` stays fast (no urllib)

    services = RemoteServices(client)
    found = services.start_tensorboard(kind, target)
    if output is Format.JSON:
        emit_json({**found, "url": services.url_of(found)})
        return
    said = "started" if found["started"] else "already running"
    typer.echo(f"TensorBoard of {kind} {found['target']['id']} ({said}, service {found['id']}):")
    typer.echo(services.url_of(found))


def _start_here(kind: str, target: str, port: int) -> None:
    from phalanx.config import Settings  # why: start-up time of the server door (no store there)
    from phalanx.services.boards import Target
    from phalanx.services.local import check_port, serve_board
    from phalanx.store import open_store
    from phalanx.store.base import ExperimentFilter

    check_port(port)
    store = open_store(Settings())
    if kind == "experiment":
        target = store.resolve_id(target)
    elif kind == "group":
        target = store.resolve_group(target)
    elif not store.list_experiments(ExperimentFilter(project=target, limit=1)).items:
        raise NotFound(f"project {target!r} has no experiment here: a TensorBoard of it would show nothing")
    status = serve_board(store, Target(kind, target), port)
    if status == 2:  # it could not listen (a port in use): it said why above
        raise typer.Exit(2)
    if status not in (0, -2, -15):  # ended otherwise than by Ctrl-C or SIGTERM
        raise typer.Exit(1)


@tensorboard_app.command("ls")
def ls(output: OutputOpt = Format.TABLE, server: ServerOpt = None) -> None:
    """The server's running TensorBoards of your projects."""
    services = _services(server, "ls")
    found = services.services()
    if output is Format.JSON:
        emit_json([{**s, "url": services.url_of(s)} for s in found])
        return
    if not found:
        typer.echo("no TensorBoard runs (`phalanx tensorboard start` starts one)")
        return
    rows = [_row(s, services.url_of(s)) for s in found]
    typer.echo(_table(["id", "project", "of", "started by", "idle", "url"], rows))


def _row(service: dict[str, Any], url: str) -> list[str]:
    target = service["target"]
    idle = f"{service['idle_seconds']:.0f}s"
    started = time.strftime("%H:%M", time.localtime(service["started_at"]))
    return [
        service["id"],
        service["project"],
        f"{target['kind']} {target['id']}",
        f"{service['started_by']} {started}",
        idle,
        url,
    ]


@tensorboard_app.command("stop")
def stop(
    service_id: Annotated[str, typer.Argument(help="the service's id (`phalanx tensorboard ls`)")],
    server: ServerOpt = None,
) -> None:
    """Stop one of the server's TensorBoards now (else it stops when nobody used it for a while)."""
    services = _services(server, "stop")
    services.stop(service_id)
    typer.echo(f"stopped TensorBoard {service_id}")
