"""`phalanx run`, `phalanx logs`, `phalanx stop`: start an experiment and supervise it, read its
console, stop it.

Only typer and the standard library are imported at module level (`phalanx --help` stays fast);
the supervisor, the store and rich are imported inside the commands.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from phalanx.cli.app import ExtraParamsOpt, app, emit_json

# typer-free (the lean `run --detach` uses them too); resume.py and group.py import them from here
from phalanx.cli.launching import Output as Output
from phalanx.cli.launching import _check_home_and_db as _check_home_and_db
from phalanx.cli.launching import _check_id as _check_id
from phalanx.cli.launching import _load as _load
from phalanx.cli.launching import launch_options, start_detached
from phalanx.cli.launching import submit_detached as submit_detached
from phalanx.cli.target import LocalOpt, ServerOpt
from phalanx.cli.terminal import guard_std_streams

if TYPE_CHECKING:
    from collections.abc import Mapping

    from phalanx.config import Settings
    from phalanx.domain import Experiment, ReplicaState
    from phalanx.store.base import IngestStore, Store


# ---- terminal observers -----------------------------------------------------------------------


class RichObserver:
    """On a terminal: a live table (replica, state, elapsed) under the streaming lines."""

    def __init__(self, names: list[str]) -> None:
        from rich.console import Console
        from rich.live import Live

        self.console = Console()
        self.names = names
        self.state: dict[str, str] = dict.fromkeys(names, "pending")
        self.since: dict[str, float] = dict.fromkeys(names, time.monotonic())
        self.ended: dict[str, float] = {}
        self.live = Live(self, console=self.console, refresh_per_second=4, transient=False)

    def __rich__(self) -> Any:
        from rich.table import Table
        from rich.text import Text

        table = Table(box=None, show_header=True, header_style="bold")
        for col in ("replica", "state", "elapsed"):
            table.add_column(col)
        colours = {"running": "cyan", "succeeded": "green", "failed": "red", "stopped": "yellow"}
        now = time.monotonic()
        for name in self.names:
            state = self.state[name]
            end = self.ended.get(name, now)
            # Text, not markup: lines printed with markup=False re-render this table too
            table.add_row(name, Text(state, style=colours.get(state, "")), f"{end - self.since[name]:.1f}s")
        return table

    def __enter__(self) -> RichObserver:
        self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.live.__exit__(None, None, None)

    def line(self, replica: str, text: str) -> None:
        self.console.print(f"[{replica}] {text}", markup=False, highlight=False, soft_wrap=True)

    def states(self, replicas: Mapping[str, ReplicaState], elapsed: float) -> None:
        now = time.monotonic()
        for name, state in replicas.items():
            if name in self.state and self.state[name] != str(state):
                self.state[name] = str(state)
                if state.done:
                    self.ended[name] = now

    def message(self, text: str) -> None:
        self.console.print(f"phalanx: {text}", markup=False, highlight=False)


# ---- phalanx run ------------------------------------------------------------------------------


@app.command("run")
def run(
    file: Annotated[
        Path, typer.Option("-f", "--file", metavar="FILE", help="The experiment file (polyaxonfile) to run.")
    ],
    param: Annotated[
        list[str] | None,
        typer.Option(
            "--param",
            metavar="NAME=VALUE",
            help="Override or add a param: NAME=VALUE (repeatable); fills {{ NAME }}.",
        ),
    ] = None,
    extra_params: ExtraParamsOpt = False,
    workdir: Annotated[
        Path | None,
        typer.Option("--workdir", metavar="DIR", help="Where replicas start (default: the file's folder)."),
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run", help="Print each replica's command, folder and environment; start nothing."
        ),
    ] = False,
    output: Annotated[
        Output, typer.Option("-o", "--output", help="text, json for scripts, or yaml (with --dry-run).")
    ] = Output.TEXT,
    oversubscribe: Annotated[
        bool,
        typer.Option(
            "--oversubscribe", help="Run even if the requests exceed this machine's cores or memory."
        ),
    ] = False,
    cluster: Annotated[
        str | None,
        typer.Option(
            "--cluster",
            metavar="NAME",
            help="Run on a cluster added with `phalanx cluster add` (with --server: one the server has).",
        ),
    ] = None,
    detach: Annotated[
        bool, typer.Option("--detach", "-d", help="Start it in the background and print its id.")
    ] = False,
    priority: Annotated[
        int,
        typer.Option(
            "--priority",
            metavar="N",
            help="Its place in this machine's queue when it must wait: higher starts first "
            "(default 0, -1000 to 1000).",
        ),
    ] = 0,
    no_wait: Annotated[
        bool,
        typer.Option(
            "--no-wait", help="Refuse (exit 2) instead of queueing when the cores/GPUs/memory are busy."
        ),
    ] = False,
    experiment_id: Annotated[str | None, typer.Option("--experiment-id", hidden=True)] = None,
    no_system_metrics: Annotated[
        bool,
        typer.Option(
            "--no-system-metrics",
            help="Do not sample the replicas' CPU, memory and GPU into system/... series.",
        ),
    ] = False,
    server: Annotated[
        str | None,
        typer.Option(
            "--server",
            metavar="URL",
            help="Submit to the Phalanx server at URL (with the file's folder as code) and print the id.",
        ),
    ] = None,
    follow: Annotated[
        bool,
        typer.Option("--follow", help="With --server: stream every replica's console until it ends."),
    ] = False,
    token_file: Annotated[
        Path | None,
        typer.Option("--token-file", metavar="FILE", help="With --server: the token (else PHALANX_TOKEN)."),
    ] = None,
    local: Annotated[
        bool, typer.Option("--local", help="Run it on this machine, even after `phalanx login`.")
    ] = False,
) -> None:
    """Run an experiment: start every replica wired for its framework and supervise it to the end.

    Exit status: 0 succeeded, 1 failed, 130 stopped, 2 invalid file or request.
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
    if server is None and not local:  # after `phalanx login URL`, the server is the default
        from phalanx import logins

        stored = logins.load(settings.home)
        server = stored.url if stored is not None else None
    elif local:
        if server is not None:
            raise UsageError("--server and --local: give one (--local runs it on this machine)")
        sys.stderr.write("phalanx: on this machine\n")
    if server is not None or follow or token_file is not None:
        from phalanx.cli.submit import run_on_server

        given: dict[str, object] = {"--workdir": workdir, "--dry-run": dry_run, "--detach": detach}
        given |= {"--no-wait": no_wait, "--experiment-id": experiment_id, "--oversubscribe": oversubscribe}
        given |= {"--extra-params": extra_params, "--no-system-metrics": no_system_metrics}
        run_on_server(file, param, priority, server, follow, token_file, output, given, settings, cluster)
        return
    from phalanx.spec.group import is_group_file

    if str(file) != "-" and is_group_file(file):  # a search: `phalanx group run`, as `polyaxon run -f` did
        not_for_groups: dict[str, object] = {"--dry-run (use `phalanx check -f FILE`)": dry_run}
        not_for_groups |= {"--no-wait": no_wait}
        not_for_groups |= {"--experiment-id": experiment_id, "--no-system-metrics": no_system_metrics}
        not_for_groups |= {"--priority": priority != 0}
        refused = [name for name, given_ in not_for_groups.items() if given_]
        if refused:
            raise UsageError(f"{', '.join(refused)}: not available for a group file (kind: group)")
        from phalanx.cli.group import run as run_group

        run_group(
            file=file,
            param=param,
            workdir=workdir,
            cluster=cluster,
            oversubscribe=oversubscribe,
            extra_params=extra_params,
            detach=detach,
            json_out=output is Output.JSON,
        )
        return
    if detach and not dry_run:
        start_detached(
            file,
            param=param,
            extra_params=extra_params,
            workdir=workdir,
            oversubscribe=oversubscribe,
            cluster=cluster,
            priority=priority,
            no_wait=no_wait,
            no_system_metrics=no_system_metrics,
            output=output,
            experiment_id=experiment_id,
            settings=settings,
        )
        return
    spec = _load(file, param, extra_params)
    for note in getattr(spec, "notes", ()):
        sys.stderr.write(f"note: {note}\n")
    options = launch_options(  # mistakes found now, before anything starts
        file,
        param=param,
        workdir=workdir,
        oversubscribe=oversubscribe,
        cluster=cluster,
        priority=priority,
        no_wait=no_wait,
        no_system_metrics=no_system_metrics,
        experiment_id=experiment_id,
        settings=settings,
        check_home=not dry_run,
    )
    from dataclasses import replace

    from phalanx.runner import Runner

    runner = Runner(settings)
    from phalanx import supervisor

    if dry_run:
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
        return
    prepared = runner.dry_run(spec, options)  # its id, and what is refused before anything is built
    _warn_if_crowded(prepared)
    owns_run_dir = experiment_id is None
    options = replace(options, experiment_id=prepared.experiment_id)
    names = [r.name for r in prepared.plan.replicas]
    try:  # may build the experiment's venv first (recorded as building meanwhile)
        if sys.stdout.isatty() and output is Output.TEXT:
            with RichObserver(names) as rich_observer:
                outcome = runner.run(spec, options, rich_observer, owns_run_dir=owns_run_dir)
        else:
            from phalanx.runner.observers import PlainObserver

            observer = PlainObserver(sys.stderr if output is Output.JSON else sys.stdout)
            outcome = runner.run(spec, options, observer, owns_run_dir=owns_run_dir)
    except KeyboardInterrupt:  # the supervisor answers Ctrl-C itself once it runs: this is before
        sys.stderr.write("phalanx: interrupted before anything started\n")
        raise typer.Exit(130) from None
    if output is Output.JSON:
        emit_json({"id": outcome.experiment_id, "status": str(outcome.status), "reason": outcome.reason})
    else:
        tail = f": {outcome.reason}" if outcome.reason else ""
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


SCRIPT_END_GRACE_SECONDS = 2.0  # a killed plain script's own ingester records its end in ~0.5 s


@app.command("logs")
def logs(
    experiment: Annotated[str, typer.Argument(metavar="ID", help="Experiment id (or a unique prefix).")],
    replica: Annotated[
        str | None,
        typer.Option("--replica", "-r", metavar="REPLICA", help="Only this replica (e.g. worker-1)."),
    ] = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing until the experiment ends.")
    ] = False,
    output: Annotated[
        Output, typer.Option("-o", "--output", help="text, or json lines for scripts.")
    ] = Output.TEXT,
    server: ServerOpt = None,
    local: LocalOpt = False,
) -> None:
    """Print the console output of an experiment's replicas (as `[worker-1] line` without --replica)."""
    from phalanx.cli import remote_commands
    from phalanx.cli.target import choose
    from phalanx.config import Settings
    from phalanx.errors import UsageError
    from phalanx.store import open_store

    if output is Output.YAML:
        raise UsageError("phalanx logs -o yaml: use -o text, or -o json for one JSON document a line")
    settings = Settings()
    client = choose(server, local, settings=settings)
    if client is not None:
        from phalanx.cli.remote_store import RemoteStore

        remote = RemoteStore(client)
        exp = remote.get_experiment(experiment)
        _check_replica(exp.id, replica, [r.name for r in remote.list_replicas(exp.id)])
        remote_commands.logs(remote, exp.id, replica, follow, output is Output.JSON)
        return
    store = open_store(settings)
    exp = store.get_experiment(experiment)
    _check_replica(exp.id, replica, [r.name for r in store.list_replicas(exp.id)])
    offsets: dict[str, int] = {}
    script_gone_at: float | None = None
    while True:
        done = store.get_experiment(exp.id).status.done  # read before the lines: none is missed
        _ingest(store, settings, exp.id)
        names = [replica] if replica else [r.name for r in store.list_replicas(exp.id)]
        printed = 0
        for name in names:
            lines = store.logs(exp.id, replica=name, offset=offsets.get(name, 0))
            remote_commands.print_lines(lines, replica, output is Output.JSON)
            if lines:
                offsets[name] = lines[-1].offset + 1
                printed += len(lines)
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


def _check_replica(experiment_id: str, replica: str | None, names: list[str]) -> None:
    from phalanx.errors import NotFound

    if replica is not None and replica not in names:
        raise NotFound(f"experiment {experiment_id} has no replica {replica!r} (it has {', '.join(names)})")


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
    experiment: Annotated[str, typer.Argument(metavar="ID", help="Experiment id (or a unique prefix).")],
    timeout: Annotated[
        float, typer.Option("--timeout", min=0, metavar="SECONDS", help="Seconds to wait for it to stop.")
    ] = 60.0,
    server: ServerOpt = None,
    local: LocalOpt = False,
) -> None:
    """Stop a running experiment: every replica is stopped and the experiment marked stopped."""
    from phalanx.cli.target import choose
    from phalanx.config import Settings
    from phalanx.store import open_store
    from phalanx.supervisor import stop_experiment

    settings = Settings()
    client = choose(server, local, settings=settings)
    if client is not None:
        from phalanx.cli import remote_commands
        from phalanx.cli.remote_store import RemoteStore

        remote_commands.stop(RemoteStore(client), experiment, timeout)
        return
    store = open_store(settings)
    exp = store.get_experiment(experiment)
    if exp.status.done:
        typer.echo(f"experiment {exp.id} already {exp.status}")
        return
    status = stop_experiment(store, settings, exp, timeout=timeout)
    typer.echo(f"experiment {exp.id} {status}")
