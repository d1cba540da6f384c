"""`phalanx run`, `phalanx logs`, `phalanx stop`: start an experiment and supervise it, read its
console, stop it.

Only typer and the standard library are imported at module level (`phalanx --help` stays fast);
the supervisor, the store and rich are imported inside the commands.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from phalanx.cli.app import ExtraParamsOpt, app, choice_option

# typer-free (the lean `run` uses them too); resume.py imports them from here
from phalanx.cli.foreground import run_foreground, warn_if_crowded
from phalanx.cli.launching import Output as Output
from phalanx.cli.launching import _check_id as _check_id
from phalanx.cli.launching import check_request, prepare_launch, start_detached
from phalanx.cli.launching import submit_detached as submit_detached
from phalanx.cli.listing import emit_json
from phalanx.cli.target import LocalOpt, ServerOpt, submit_server
from phalanx.cli.terminal import guard_std_streams

if TYPE_CHECKING:
    from phalanx.config import Settings
    from phalanx.domain import Experiment
    from phalanx.runner import LaunchOptions, Runner
    from phalanx.store.base import IngestStore, Store


# ---- phalanx run ------------------------------------------------------------------------------

# `phalanx run`'s options, one alias each: the command's signature stays a readable list
FileOpt = Annotated[
    Path, typer.Option("-f", "--file", metavar="FILE", help="The experiment file (polyaxonfile) to run.")
]
ParamOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--param",
        metavar="NAME=VALUE",
        help="Override or add a param: NAME=VALUE (repeatable); fills {{ NAME }}.",
    ),
]
WorkdirOpt = Annotated[
    Path | None,
    typer.Option("--workdir", metavar="DIR", help="Where replicas start (default: the file's folder)."),
]
DryRunOpt = Annotated[
    bool,
    typer.Option("--dry-run", help="Print each replica's command, folder and environment; start nothing."),
]
RunOutputOpt = Annotated[
    Output, choice_option(Output, "-o", "--output", help="text, json for scripts, or yaml (with --dry-run).")
]
OversubscribeOpt = Annotated[
    bool,
    typer.Option("--oversubscribe", help="Run even if the requests exceed this machine's cores or memory."),
]
RunClusterOpt = Annotated[
    str | None,
    typer.Option(
        "--cluster",
        metavar="NAME",
        help="Run on a cluster added with `phalanx cluster add` (with --server: one the server has).",
    ),
]
DetachOpt = Annotated[
    bool, typer.Option("--detach", "-d", help="Start it in the background and print its id.")
]
PriorityOpt = Annotated[
    int,
    typer.Option(
        "--priority",
        metavar="N",
        help="Its place in this machine's queue when it must wait: higher starts first "
        "(default 0, -1000 to 1000).",
    ),
]
NoWaitOpt = Annotated[
    bool,
    typer.Option(
        "--no-wait", help="Refuse (exit 2) instead of queueing when the cores/GPUs/memory are busy."
    ),
]
ExperimentIdOpt = Annotated[str | None, typer.Option("--experiment-id", hidden=True)]
NoSystemMetricsOpt = Annotated[
    bool,
    typer.Option(
        "--no-system-metrics",
        help="Do not sample the replicas' CPU, memory and GPU into system/... series.",
    ),
]
RunServerOpt = Annotated[
    str | None,
    typer.Option(
        "--server",
        metavar="URL",
        help="Submit to the Phalanx server at URL (with the file's folder as code) and print the id.",
    ),
]
FollowOpt = Annotated[
    bool, typer.Option("--follow", help="With --server: stream every replica's console until it ends.")
]
TokenFileOpt = Annotated[
    Path | None,
    typer.Option("--token-file", metavar="FILE", help="With --server: the token (else PHALANX_TOKEN)."),
]
RunLocalOpt = Annotated[
    bool, typer.Option("--local", help="Run it on this machine, even after `phalanx login`.")
]


@dataclass(frozen=True)
class RunRequest:
    """What `phalanx run` was asked: its options, passed whole to the helpers that handle each path."""

    file: Path
    param: list[str] | None
    extra_params: bool
    workdir: Path | None
    dry_run: bool
    output: Output
    oversubscribe: bool
    cluster: str | None
    detach: bool
    priority: int
    no_wait: bool
    experiment_id: str | None
    no_system_metrics: bool


@app.command("run")
def run(
    file: FileOpt,
    param: ParamOpt = None,
    extra_params: ExtraParamsOpt = False,
    workdir: WorkdirOpt = None,
    dry_run: DryRunOpt = False,
    output: RunOutputOpt = Output.TEXT,
    oversubscribe: OversubscribeOpt = False,
    cluster: RunClusterOpt = None,
    detach: DetachOpt = False,
    priority: PriorityOpt = 0,
    no_wait: NoWaitOpt = False,
    experiment_id: ExperimentIdOpt = None,
    no_system_metrics: NoSystemMetricsOpt = False,
    server: RunServerOpt = None,
    follow: FollowOpt = False,
    token_file: TokenFileOpt = None,
    local: RunLocalOpt = False,
) -> None:
    """Run an experiment: start every replica wired for its framework and supervise it to the end.

    Exit status: 0 succeeded, 1 failed, 130 stopped, 2 invalid file or request, 69 server or database
    unreachable.
    """
    import faulthandler
    import signal

    from phalanx.config import Settings

    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1 PID`: where is it stuck?
    guard_std_streams()  # `phalanx run ... | head`: a closed pipe ends the echo, not the experiment
    settings = Settings()
    check_request(experiment_id, priority, output, dry_run)
    request = RunRequest(
        file=file,
        param=param,
        extra_params=extra_params,
        workdir=workdir,
        dry_run=dry_run,
        output=output,
        oversubscribe=oversubscribe,
        cluster=cluster,
        detach=detach,
        priority=priority,
        no_wait=no_wait,
        experiment_id=experiment_id,
        no_system_metrics=no_system_metrics,
    )
    server = submit_server(server, local, settings)
    if server is not None or follow or token_file is not None:
        _run_on_server(request, server, follow, token_file, settings)
    elif str(file) != "-" and _is_group_file(file):  # a search: `phalanx group run`, as `polyaxon run -f` did
        _run_group_file(request)
    elif detach and not dry_run:
        _start_detached(request, settings)
    else:
        _run_here(request, settings)


def _run_on_server(
    request: RunRequest, server: str | None, follow: bool, token_file: Path | None, settings: Settings
) -> None:
    """Submit to the server (the options a server run does not take are refused by ``run_on_server``)."""
    from phalanx.cli.submit import run_on_server
    from phalanx.errors import UsageError

    r = request
    if r.detach and follow:
        raise UsageError("--detach and --follow: give one (a server run is detached unless --follow)")
    # a server run is detached already: --detach (a script's `phalanx run -d`) changes nothing there
    given: dict[str, object] = {"--workdir": r.workdir, "--dry-run": r.dry_run}
    given |= {"--no-wait": r.no_wait, "--experiment-id": r.experiment_id, "--oversubscribe": r.oversubscribe}
    given |= {"--no-system-metrics": r.no_system_metrics}
    run_on_server(
        r.file,
        r.param,
        r.priority,
        server,
        follow,
        token_file,
        r.output,
        given,
        settings,
        r.cluster,
        extra_params=r.extra_params,
    )


def _is_group_file(file: Path) -> bool:
    from phalanx.spec.group import is_group_file

    return is_group_file(file)


def _run_group_file(request: RunRequest) -> None:
    """A group file (kind: group) runs as `phalanx group run`; experiment-only options are refused."""
    from phalanx.errors import UsageError

    r = request
    not_for_groups: dict[str, object] = {"--dry-run (use `phalanx check -f FILE`)": r.dry_run}
    not_for_groups |= {"--no-wait": r.no_wait}
    not_for_groups |= {"--experiment-id": r.experiment_id, "--no-system-metrics": r.no_system_metrics}
    not_for_groups |= {"--priority": r.priority != 0}
    refused = [name for name, given_ in not_for_groups.items() if given_]
    if refused:
        raise UsageError(f"{', '.join(refused)}: not available for a group file (kind: group)")
    from phalanx.cli.group import run as run_group

    run_group(
        file=r.file,
        param=r.param,
        workdir=r.workdir,
        cluster=r.cluster,
        oversubscribe=r.oversubscribe,
        extra_params=r.extra_params,
        detach=r.detach,
        json_out=r.output is Output.JSON,
    )


def _start_detached(request: RunRequest, settings: Settings) -> None:
    r = request
    start_detached(
        r.file,
        param=r.param,
        extra_params=r.extra_params,
        workdir=r.workdir,
        oversubscribe=r.oversubscribe,
        cluster=r.cluster,
        priority=r.priority,
        no_wait=r.no_wait,
        no_system_metrics=r.no_system_metrics,
        output=r.output,
        experiment_id=r.experiment_id,
        settings=settings,
    )


def _run_here(request: RunRequest, settings: Settings) -> None:
    """Show the dry run, or supervise the experiment here to its end (cli/foreground.py, which the
    lean door runs too)."""
    r = request
    if not r.dry_run:
        run_foreground(
            r.file,
            param=r.param,
            extra_params=r.extra_params,
            workdir=r.workdir,
            oversubscribe=r.oversubscribe,
            cluster=r.cluster,
            priority=r.priority,
            no_wait=r.no_wait,
            no_system_metrics=r.no_system_metrics,
            output=r.output,
            experiment_id=r.experiment_id,
            settings=settings,
        )
    spec, options = prepare_launch(
        r.file,
        param=r.param,
        extra_params=r.extra_params,
        workdir=r.workdir,
        oversubscribe=r.oversubscribe,
        cluster=r.cluster,
        priority=r.priority,
        no_wait=r.no_wait,
        no_system_metrics=r.no_system_metrics,
        experiment_id=r.experiment_id,
        settings=settings,
        check_home=False,
    )
    from phalanx.runner import Runner

    _show_dry_run(Runner(settings), spec, options, r.output)


def _show_dry_run(runner: Runner, spec: Any, options: LaunchOptions, output: Output) -> None:
    from phalanx import supervisor
    from phalanx.errors import UsageError

    prepared = runner.dry_run(spec, options)
    warn_if_crowded(prepared)
    if output is Output.YAML and prepared.dry_run.format == "json":
        raise UsageError(
            f"-o yaml: the {prepared.backend.name} engine has no YAML to show (Kubernetes clusters do); "
            "use -o text, or -o json"
        )
    if output is Output.JSON:
        emit_json(supervisor.dry_run_json(prepared))
    else:
        typer.echo(supervisor.render_dry_run(prepared))


# ---- phalanx logs -----------------------------------------------------------------------------


class LogsOutput(StrEnum):
    """`phalanx logs -o`: the lines as printed, or one JSON document a line (no yaml: it has no
    document of its own to render)."""

    TEXT = "text"
    JSON = "json"


SCRIPT_END_GRACE_SECONDS = 2.0  # a killed plain script's own ingester records its end in ~0.5 s


@app.command("logs")
def logs(
    experiment: Annotated[str, typer.Argument(metavar="ID", help="Experiment id (or a unique prefix).")],
    replica: Annotated[
        str | None,
        typer.Option(
            "--replica",
            "-r",
            metavar="REPLICA",
            help="Only this replica (e.g. worker-1), or build: the environment build's lines.",
        ),
    ] = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing until the experiment ends.")
    ] = False,
    output: Annotated[
        LogsOutput, choice_option(LogsOutput, "-o", "--output", help="text, or json lines for scripts.")
    ] = LogsOutput.TEXT,
    server: ServerOpt = None,
    local: LocalOpt = False,
) -> None:
    """Print the console output of an experiment's replicas (as `[worker-1] line` without --replica)."""
    from phalanx.cli import remote_commands
    from phalanx.cli.console_lines import print_console
    from phalanx.config import Settings
    from phalanx.logins import choose
    from phalanx.store import open_store
    from phalanx.views import check_console

    settings = Settings()
    client = choose(server, local, settings=settings)
    if client is not None:
        from phalanx.remote_store import RemoteStore

        remote = RemoteStore(client)
        exp = remote.get_experiment(experiment)
        check_console(remote, exp, replica)
        remote_commands.logs(remote, exp.id, replica, follow, output is LogsOutput.JSON)
        return
    store = open_store(settings)
    exp = store.get_experiment(experiment)
    check_console(store, exp, replica)
    offsets: dict[str, int] = {}
    script_gone_at: float | None = None
    while True:
        done = store.get_experiment(exp.id).status.done  # read before the lines: none is missed
        _ingest(store, settings, exp.id)
        printed = print_console(store, exp.id, replica, output is LogsOutput.JSON, offsets)
        sys.stdout.flush()
        if not follow or done:
            return
        gone = None if printed else _gone(store, settings, exp)
        if gone == "script":
            # a plain script records its end through its detached ingester, after its last lines:
            # give that a moment, then judge it as `phalanx get` does (a killed script is marked
            # failed) and print what is left, instead of "gone" depending on who came first
            if script_gone_at is None:
                script_gone_at = time.monotonic()
            if time.monotonic() - script_gone_at < SCRIPT_END_GRACE_SECONDS:
                time.sleep(0.3)
                continue
            from phalanx.reconcile import settle

            if settle(store, settings, store.get_experiment(exp.id)).status.done:
                continue  # the next pass reads `done`, prints the last lines and returns
        if gone and not store.get_experiment(exp.id).status.done:
            sys.stderr.write(
                f"phalanx: the {gone} of experiment {exp.id} is gone (killed?): no more lines will "
                f"come; `phalanx stop {exp.id}` marks it stopped\n"
            )
            raise typer.Exit(1)
        if not printed:
            time.sleep(0.3)


def _gone(store: Store, settings: Settings, exp: Experiment) -> str | None:
    """What ended without recording the experiment's end ("supervisor", "script"), if this machine
    can tell (``reconcile.gone_recorder``: the one liveness check). None when it cannot tell."""
    from phalanx.reconcile import gone_recorder

    return gone_recorder(store, settings, exp)


def _ingest(store: IngestStore, settings: Settings, experiment_id: str) -> None:
    """One ingest pass over the experiment's spool: fresh lines even when no supervisor runs."""
    try:
        from phalanx.ingest import Ingester

        Ingester(store, None, settings.spool_dir / experiment_id).run_once()
    except Exception:  # reading must work even if the spool cannot be ingested right now
        return


# ---- phalanx stop -----------------------------------------------------------------------------


@app.command("stop")
def stop(
    experiment: Annotated[
        str, typer.Argument(metavar="ID", help="Experiment id: full, or at least 8 characters of one.")
    ],
    timeout: Annotated[
        float, typer.Option("--timeout", min=0, metavar="SECONDS", help="Seconds to wait for it to stop.")
    ] = 60.0,
    server: ServerOpt = None,
    local: LocalOpt = False,
) -> None:
    """Stop a running experiment: every replica is stopped and the experiment marked stopped."""
    from phalanx.config import Settings
    from phalanx.ids import check_destructive
    from phalanx.logins import choose
    from phalanx.store import open_store
    from phalanx.supervisor import stop_experiment

    settings = Settings()
    client = choose(server, local, settings=settings)
    if client is not None:
        from phalanx.cli import remote_commands
        from phalanx.remote_store import RemoteStore

        remote_commands.stop(RemoteStore(client), experiment, timeout)
        return
    store = open_store(settings)
    exp = store.get_experiment(experiment)
    check_destructive(
        experiment, exp.id, "stop"
    )  # as the server's stop: a short prefix names another tomorrow
    if exp.status.done:
        typer.echo(f"experiment {exp.id} already {exp.status}")
        return
    status = stop_experiment(store, settings, exp, timeout=timeout)
    typer.echo(f"experiment {exp.id} {status}")
