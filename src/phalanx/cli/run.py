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
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from phalanx.cli.app import ExtraParamsOpt, app, choice_option

# typer-free (the lean `run --detach` uses them too); resume.py and group.py import them from here
from phalanx.cli.launching import Output as Output
from phalanx.cli.launching import _check_home_and_db as _check_home_and_db
from phalanx.cli.launching import _check_id as _check_id
from phalanx.cli.launching import _load as _load
from phalanx.cli.launching import launch_options, launched_json, start_detached
from phalanx.cli.launching import submit_detached as submit_detached
from phalanx.cli.listing import emit_json
from phalanx.cli.live_table import RichObserver
from phalanx.cli.target import LocalOpt, ServerOpt, submit_server
from phalanx.cli.terminal import guard_std_streams
from phalanx.terminal_text import for_stream

if TYPE_CHECKING:
    from phalanx.config import Settings
    from phalanx.domain import Experiment
    from phalanx.runner import LaunchOptions, Runner
    from phalanx.store.base import IngestStore, Store
    from phalanx.supervisor import Outcome as RunOutcome


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
    from phalanx.errors import UsageError

    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1 PID`: where is it stuck?
    guard_std_streams()  # `phalanx run ... | head`: a closed pipe ends the echo, not the experiment
    settings = Settings()
    if experiment_id is not None:
        _check_id(experiment_id)
    from phalanx.queue import check_priority

    check_priority(priority, "--priority")
    if output is Output.YAML and not dry_run:
        raise UsageError("-o yaml shows what --dry-run would submit: add --dry-run, or use -o text or json")
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
    """Validate, then either show the dry run or supervise the experiment here to its end."""
    r = request
    spec = _load(r.file, r.param, r.extra_params)
    for note in getattr(spec, "notes", ()):
        sys.stderr.write(f"note: {note}\n")
    options = launch_options(  # mistakes found now, before anything starts
        r.file,
        param=r.param,
        workdir=r.workdir,
        oversubscribe=r.oversubscribe,
        cluster=r.cluster,
        priority=r.priority,
        no_wait=r.no_wait,
        no_system_metrics=r.no_system_metrics,
        experiment_id=r.experiment_id,
        settings=settings,
        check_home=not r.dry_run,
    )
    from phalanx.runner import Runner

    runner = Runner(settings)
    if r.dry_run:
        _show_dry_run(runner, spec, options, r.output)
        return
    outcome = _supervise(runner, spec, options, r)
    _report_outcome(outcome, r.output, settings)


def _show_dry_run(runner: Runner, spec: Any, options: LaunchOptions, output: Output) -> None:
    from phalanx import supervisor
    from phalanx.errors import UsageError

    prepared = runner.dry_run(spec, options)
    _warn_if_crowded(prepared)
    if output is Output.YAML and prepared.dry_run.format == "json":
        raise UsageError(
            f"-o yaml: the {prepared.backend.name} engine has no YAML to show (Kubernetes clusters do); "
            "use -o text, or -o json"
        )
    if output is Output.JSON:
        emit_json(supervisor.dry_run_json(prepared))
    else:
        typer.echo(supervisor.render_dry_run(prepared))


def _supervise(runner: Runner, spec: Any, options: LaunchOptions, request: RunRequest) -> RunOutcome:
    """Start the experiment and watch it to its end: a live table on a terminal, plain lines else."""
    from dataclasses import replace

    prepared = runner.dry_run(spec, options)  # its id, and what is refused before anything is built
    _warn_if_crowded(prepared)
    owns_run_dir = request.experiment_id is None
    options = replace(options, experiment_id=prepared.experiment_id)
    names = [r.name for r in prepared.plan.replicas]
    output = request.output
    try:  # may build the experiment's venv first (recorded as building meanwhile)
        if sys.stdout.isatty() and output is Output.TEXT:
            with RichObserver(names) as rich_observer:
                return runner.run(spec, options, rich_observer, owns_run_dir=owns_run_dir)
        from phalanx.runner.observers import PlainObserver

        observer = PlainObserver(sys.stderr if output is Output.JSON else sys.stdout)
        return runner.run(spec, options, observer, owns_run_dir=owns_run_dir)
    except KeyboardInterrupt:  # the supervisor answers Ctrl-C itself once it runs: this is before
        sys.stderr.write("phalanx: interrupted before anything started\n")
        raise typer.Exit(130) from None


def _report_outcome(outcome: RunOutcome, output: Output, settings: Settings) -> NoReturn:
    """Say how it ended (and where to see it) and exit with its status."""
    if output is Output.JSON:
        emit_json(launched_json(outcome.experiment_id, str(outcome.status), outcome.reason))
    else:
        # a failure's reason may quote the replica's last lines: escaped on a terminal as its lines are
        tail = f": {for_stream(sys.stderr)(outcome.reason)}" if outcome.reason else ""
        sys.stderr.write(f"phalanx: experiment {outcome.experiment_id} {outcome.status}{tail}\n")
        from phalanx.cli.server import ui_hint

        if settings.host and _server_knows(settings.host, settings.token, outcome.experiment_id) is False:
            sys.stderr.write(
                f"phalanx: the server at {settings.host} (PHALANX_HOST) does not know experiment "
                f"{outcome.experiment_id}: it keeps another store than this machine's "
                f"({settings.database_url}), so it refused what the replicas reported and its web UI "
                f"cannot show it. It is in this machine's store: `phalanx get {outcome.experiment_id}`. "
                "Give `phalanx run` the server's database (PHALANX_DB_URL) to record it there.\n"
            )
        else:
            from phalanx.server.address import running_url

            running = running_url(settings.home, settings.database_url)
            sys.stderr.write(ui_hint(outcome.experiment_id, settings.host, running) + "\n")
    raise typer.Exit(outcome.exit_code)


def _server_knows(host: str, token: str | None, experiment_id: str) -> bool | None:
    """Whether the server at ``host`` has the experiment: False on 404 (it keeps another store),
    None when it cannot be asked (down, no access)."""
    import urllib.error
    import urllib.request

    req = urllib.request.Request(f"{host.rstrip('/')}/api/v1/experiments/{experiment_id}")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return bool(resp.status == 200)
    except urllib.error.HTTPError as exc:
        return False if exc.code == 404 else None
    except (OSError, ValueError):
        return None


def _warn_if_crowded(prepared: Any) -> None:
    """More local processes than cores, none of them asking for cores: say so before they start."""
    if prepared.backend.name != "local":
        return
    from phalanx.machine import limits

    replicas = [(r.name, r.resources, r.processes) for r in prepared.plan.replicas]
    warning = limits.crowding_warning(replicas, limits.machine())
    if warning:
        sys.stderr.write(f"warning: {warning}\n")


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
