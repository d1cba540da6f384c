"""`phalanx notebook start|ls|stop`: a Jupyter notebook server (JupyterLab) on a project, with the
project's inputs (docs/services.md).

On a server (`phalanx login URL`, or --server URL) `start` asks for the project's notebook server:
it runs boxed as the project's account, its notebooks kept in the project's folder on the server,
its inputs fetched as an experiment's are, and answers at ``URL/services/ID/`` to the project's
editors (the one that runs is handed back; it stops when idle). On this machine alone it runs
JupyterLab in the current folder, on a loopback port, in the foreground until Ctrl-C.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Annotated

import typer

from phalanx.cli.app import OutputOpt, app
from phalanx.cli.listing import Format
from phalanx.cli.service_commands import list_services, said_started, stop_service
from phalanx.cli.target import LocalOpt, ServerOpt
from phalanx.errors import UsageError
from phalanx.logins import choose

notebook_app = typer.Typer(
    help="A Jupyter notebook server on a project, with its inputs (JupyterLab).", no_args_is_help=True
)
app.add_typer(notebook_app, name="notebook")


def parse_input(given: str) -> dict[str, str]:
    """``NAME=DATASET[@VERSION]`` (or ``NAME=datastore:STORE``) as an experiment file's input."""
    name, sep, what = given.partition("=")
    if not sep or not name or not what:
        raise UsageError(
            f"--input {given!r}: give NAME=DATASET[@VERSION] (e.g. digits=digits@latest)"
            " or NAME=datastore:STORE"
        )
    if what.startswith("datastore:"):
        return {"name": name, "datastore": what.removeprefix("datastore:")}
    return {"name": name, "dataset": what}


@notebook_app.command("start")
def start(
    project: Annotated[
        str, typer.Option("--project", help="whose notebook server (on a server)")
    ] = "default",
    inputs: Annotated[
        list[str] | None,
        typer.Option(
            "--input",
            metavar="NAME=DATASET[@VERSION]",
            help="an input its kernels find in $PHALANX_INPUT_NAME (repeat for more)",
        ),
    ] = None,
    port: Annotated[int, typer.Option("--port", help="this machine alone: the loopback port")] = 8888,
    output: OutputOpt = Format.TABLE,
    server: ServerOpt = None,
    local: LocalOpt = False,
) -> None:
    """Start the project's notebook server (on a server: or get the one that runs) and print where
    it answers."""
    wanted = [parse_input(i) for i in inputs or ()]
    client = choose(server, local)
    if client is None:
        _start_here(wanted, port)
        return
    from phalanx.remote_store import RemoteServices  # why: `phalanx --help` stays fast (no urllib)

    services = RemoteServices(client)
    found = services.start_notebook(project, wanted)
    said_started("notebook", found, services.url_of(found), output)


def _start_here(wanted: list[dict[str, str]], port: int) -> None:
    from phalanx import extras  # why: start-up time of the server door (no store there), as below
    from phalanx.config import Settings
    from phalanx.data import inputs as data_inputs
    from phalanx.services.local import check_port
    from phalanx.spec.inputs import parse_inputs

    check_port(port)
    extras.require("jupyterlab", "services", "phalanx notebook start")
    env, _ = data_inputs.resolve(parse_inputs(wanted, "--input"), Settings())
    argv = [
        sys.executable,
        "-m",
        "jupyterlab",
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
    ]
    if os.geteuid() == 0:  # JupyterLab refuses root unless told: whoever typed this is root already
        argv.append("--ServerApp.allow_root=True")
    notebook = subprocess.Popen(argv, env={**os.environ, **env}, stdin=subprocess.DEVNULL)
    for ending in (signal.SIGTERM, signal.SIGHUP):  # as Ctrl-C: JupyterLab ends with this command
        signal.signal(ending, lambda *_: notebook.terminate())
    try:
        status = notebook.wait()
    except KeyboardInterrupt:  # JupyterLab got the terminal's Ctrl-C too, and asks to confirm it
        notebook.terminate()
        status = notebook.wait()
    if status not in (0, -2, -15, 130):
        raise typer.Exit(1)


@notebook_app.command("ls")
def ls(output: OutputOpt = Format.TABLE, server: ServerOpt = None) -> None:
    """The server's running notebook servers of your projects."""
    list_services("notebook", output, server)


@notebook_app.command("stop")
def stop(
    service_id: Annotated[str, typer.Argument(help="the service's id (`phalanx notebook ls`)")],
    server: ServerOpt = None,
) -> None:
    """Stop the server's notebook server now (its notebooks stay in the project's folder)."""
    stop_service("notebook", service_id, server)
