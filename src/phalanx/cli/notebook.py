"""`phalanx notebook start|ls|stop`: a Jupyter notebook server (JupyterLab) on a project, with the
project's inputs (docs/services.md).

On a server (`phalanx login URL`, or --server URL) `start` asks for the project's notebook server:
it runs boxed as the project's account, its notebooks kept in the project's folder on the server,
its inputs fetched as an experiment's are, and answers at ``URL/services/ID/`` to the project's
editors (the one that runs is handed back; it stops when idle). On this machine alone it runs
JupyterLab in the current folder, on a loopback port, in the foreground until Ctrl-C.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from phalanx import queue
from phalanx.bundles import pack
from phalanx.cli.app import OutputOpt, app
from phalanx.cli.listing import Format
from phalanx.cli.service_commands import list_services, said_started, stop_service
from phalanx.cli.target import DoorTyper, LocalOpt, ServerOpt
from phalanx.errors import UsageError
from phalanx.logins import choose
from phalanx.machine.box import ended_with_parent
from phalanx.sdkcopy import sdk_path
from phalanx.services.kernels import NO_NATIVE_KERNEL, environment_label, kernel_build, write_kernel
from phalanx.services.seats import give_back, take_seat
from phalanx.share import DEFAULT_PROJECT
from phalanx.spec.service_files import NotebookFile, load_notebook_file

if TYPE_CHECKING:
    from phalanx.config import Settings

notebook_app = DoorTyper(
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
    file: Annotated[
        Path | None,
        typer.Option(
            "-f",
            "--file",
            help="a `kind: notebook` file: its kernels' build, resources and inputs (a server gets its code)",
        ),
    ] = None,
    project: Annotated[
        str | None, typer.Option("--project", help="whose notebook server (on a server; default: the file's)")
    ] = None,
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
    notebook = load_notebook_file(file) if file is not None else NotebookFile(Path.cwd())
    for note in notebook.notes:
        typer.echo(f"note: {note}", err=True)
    wanted = [i.to_json() for i in notebook.inputs] + [parse_input(i) for i in inputs or ()]
    client = choose(server, local)
    if client is None:
        _start_here(wanted, port, notebook, project or notebook.project or DEFAULT_PROJECT)
        return
    from phalanx.remote_store import RemoteServices  # why: `phalanx --help` stays fast (no urllib)

    services = RemoteServices(client)
    build = _build_sent(notebook)
    if build is not None:
        typer.echo("building the kernels' environment on the server (the first time: minutes) ...", err=True)
    code = pack(notebook.folder) if file is not None else None  # the file's folder, as a submit sends it
    where = project or notebook.project or DEFAULT_PROJECT
    found = services.start_notebook(where, wanted, build, notebook.resources, code)
    said_started("notebook", found, services.url_of(found), output)
    if found.get("holds") and output is not Format.JSON:
        typer.echo(f"it holds {found['holds']}")
    if file is not None and not found["started"]:
        typer.echo(
            "note: the project's notebook server was running: it keeps the code, environment and"
            " resources it started with; `phalanx notebook stop` it and start it again for this file's",
            err=True,
        )


def _build_sent(notebook: NotebookFile) -> dict[str, Any] | None:
    """The file's build as the server takes it (its requirements file as its text), or None."""
    build = notebook.build
    if not (build.pip_packages or build.requirements or build.build_steps):
        return None
    requirements = None
    if build.requirements:
        path = notebook.folder / build.requirements
        try:
            requirements = path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(
                f"build.requirements: cannot read {path} ({exc}); the path is relative to the file"
            ) from None
    return {
        "pip_packages": list(build.pip_packages),
        "requirements": requirements,
        "build_steps": list(build.build_steps),
        "env_vars": dict(build.env_vars),
    }


def _start_here(wanted: list[dict[str, str]], port: int, notebook: NotebookFile, project: str) -> None:
    from phalanx import extras  # why: start-up time of the server door (no store there), as below
    from phalanx.config import Settings
    from phalanx.data import inputs as data_inputs
    from phalanx.services.local import check_port
    from phalanx.spec.inputs import parse_inputs
    from phalanx.store import open_store

    check_port(port)
    extras.require("jupyterlab", "services", "phalanx notebook start")
    settings = Settings()
    env, _ = data_inputs.resolve(parse_inputs(wanted, "--input"), settings)
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
    argv = ended_with_parent(argv)  # it ends with this command however it ends (its seat too)
    with tempfile.TemporaryDirectory(prefix="phalanx-kernel-") as data:
        if (python := _kernel_python(notebook, settings)) is not None:
            label = environment_label(python)
            write_kernel(Path(data), python, sdk_path(settings.home), label)
            env = {**env, "JUPYTER_PATH": data}
            argv.append(NO_NATIVE_KERNEL)
            typer.echo(f"kernels run in {label} ({python})", err=True)
        ledger = queue.ledger_for(settings)
        quotas = queue.local_limits(open_store(settings)) if notebook.resources else {}
        seat = take_seat(ledger, f"notebook-{os.getpid()}", notebook.resources, project, "notebook", quotas)
        try:
            if seat is not None:
                typer.echo(f"the notebook holds {seat.describe()}", err=True)
                env = {**env, **seat.env()}
                argv = seat.command(argv)
            with seat.pinned() if seat is not None else contextlib.nullcontext():
                notebook_server = subprocess.Popen(argv, env={**os.environ, **env}, stdin=subprocess.DEVNULL)
            _wait_here(notebook_server)
        finally:
            give_back(ledger, seat)


def _kernel_python(notebook: NotebookFile, settings: Settings) -> Path | None:
    """The python of the file's build environment with ipykernel (built here on first use, pip's
    progress on stderr), or None when it builds nothing (the kernels run Phalanx's own)."""
    from phalanx import buildenv  # why: start-up time (pip's machinery only for a build)
    from phalanx.buildprogress import BuildProgress

    if not buildenv.wants_env(notebook.build):
        return None
    progress = BuildProgress(lambda lines: typer.echo("\n".join(lines), err=True))
    return buildenv.ensure_env(
        kernel_build(notebook.build), notebook.folder, settings.venvs_dir, progress=progress
    )


def _wait_here(notebook: subprocess.Popen[bytes]) -> None:
    """JupyterLab in the foreground until Ctrl-C or SIGTERM."""
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
