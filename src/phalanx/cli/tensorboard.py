"""`phalanx tensorboard start|ls|stop`: TensorBoard over what Phalanx recorded, for an experiment, a
group's trials or a project (docs/services.md).

On a server (`phalanx login URL`, or --server URL) `start` asks the server for the target's
TensorBoard, which runs boxed as a service and answers at ``URL/services/ID/`` to the project's
members (the one that runs is handed back when asked again; it stops when idle). On this machine
alone it runs in the foreground on a loopback port until Ctrl-C; `ls` and `stop` are a server's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from phalanx.cli.app import OutputOpt, app
from phalanx.cli.listing import Format
from phalanx.cli.service_commands import list_services, said_started, stop_service
from phalanx.cli.target import DoorTyper, LocalOpt, ServerOpt
from phalanx.errors import NotFound, UsageError
from phalanx.logins import choose
from phalanx.spec.service_files import load_board_file

tensorboard_app = DoorTyper(
    help="TensorBoard over what Phalanx recorded: of an experiment, a group's trials or a project.",
    no_args_is_help=True,
)
app.add_typer(tensorboard_app, name="tensorboard")


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
    file: Annotated[
        Path | None,
        typer.Option(
            "-f", "--file", help="a `kind: tensorboard` file: the project's board, unless a target is named"
        ),
    ] = None,
    port: Annotated[int, typer.Option("--port", help="this machine alone: the loopback port")] = 6006,
    output: OutputOpt = Format.TABLE,
    server: ServerOpt = None,
    local: LocalOpt = False,
) -> None:
    """Start TensorBoard for an experiment, a group or a project (on a server: or get the one that
    runs) and print where it answers."""
    if file is not None:
        board = load_board_file(file)
        for note in board.notes:
            typer.echo(f"note: {note}", err=True)
        if not (experiment or group or project):
            if board.project is None:
                raise UsageError(
                    f"{file} names no project: add `project: NAME` to it, or name a target"
                    " (`phalanx tensorboard start ID`, --group ID, --project NAME)"
                )
            project = board.project
    kind, target = _target(experiment, group, project)
    client = choose(server, local)
    if client is None:
        _start_here(kind, target, port)
        return
    from phalanx.remote_store import RemoteServices  # why: `phalanx --help` stays fast (no urllib)

    services = RemoteServices(client)
    found = services.start_tensorboard(kind, target)
    said_started("TensorBoard", found, services.url_of(found), output)


def _start_here(kind: str, target: str, port: int) -> None:
    from phalanx import extras  # why: start-up time of the server door (no store there), as below

    extras.require("tensorboard", "services", "phalanx tensorboard start")
    from phalanx.config import Settings
    from phalanx.domain import ExperimentFilter
    from phalanx.services.local import check_port, serve_board  # why: the services extra (TensorBoard)
    from phalanx.services.targets import Target
    from phalanx.store import open_store

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
    list_services("tensorboard", output, server)


@tensorboard_app.command("stop")
def stop(
    service_id: Annotated[str, typer.Argument(help="the service's id (`phalanx tensorboard ls`)")],
    server: ServerOpt = None,
) -> None:
    """Stop one of the server's TensorBoards now (else it stops when nobody used it for a while)."""
    stop_service("tensorboard", service_id, server)
