"""A foreground `phalanx run`: the experiment supervised in this process to its end, its outcome
said and made the exit status (0 succeeded, 1 failed, 130 stopped). No typer here: cli/lean.py runs
a plain `phalanx run -f FILE` through ``run_foreground`` without importing typer, click and pydantic
(issue 42, docs/cli-speed.md); the Typer command (cli/run.py) calls the same function, and ends the
same way: ``SystemExit`` with the status, which cli/main.py takes for both doors.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from phalanx.cli.launching import Output, check_request, launched_json, prepare_launch
from phalanx.cli.listing import emit_json
from phalanx.cli.live_table import RichObserver
from phalanx.terminal_text import for_stream

if TYPE_CHECKING:
    from phalanx.config import Settings
    from phalanx.runner import LaunchOptions, Runner
    from phalanx.supervisor import Outcome


def run_foreground(
    file: Path,
    *,
    param: list[str] | None = None,
    extra_params: bool = False,
    workdir: Path | None = None,
    oversubscribe: bool = False,
    cluster: str | None = None,
    priority: int = 0,
    no_wait: bool = False,
    no_system_metrics: bool = False,
    output: Output = Output.TEXT,
    experiment_id: str | None = None,
    settings: Settings | None = None,
) -> NoReturn:
    """`phalanx run -f FILE`: every mistake found before anything starts (exit 2), then the
    experiment supervised here, its outcome said, and its status the exit status."""
    from phalanx.config import Settings

    settings = settings or Settings()
    check_request(experiment_id, priority, output)
    spec, options = prepare_launch(
        file,
        param=param,
        extra_params=extra_params,
        workdir=workdir,
        oversubscribe=oversubscribe,
        cluster=cluster,
        priority=priority,
        no_wait=no_wait,
        no_system_metrics=no_system_metrics,
        experiment_id=experiment_id,
        settings=settings,
    )
    from phalanx.runner import Runner

    outcome = _supervise(Runner(settings), spec, options, output, owns_run_dir=experiment_id is None)
    report_outcome(outcome, output, settings)


def _supervise(
    runner: Runner, spec: Any, options: LaunchOptions, output: Output, *, owns_run_dir: bool
) -> Outcome:
    """Start the experiment and watch it to its end: a live table on a terminal, plain lines else."""
    from dataclasses import replace

    prepared = runner.dry_run(spec, options)  # its id, and what is refused before anything is built
    warn_if_crowded(prepared)
    options = replace(options, experiment_id=prepared.experiment_id)
    names = [r.name for r in prepared.plan.replicas]
    try:  # may build the experiment's venv first (recorded as building meanwhile)
        if sys.stdout.isatty() and output is Output.TEXT:
            with RichObserver(names) as rich_observer:
                return runner.run(spec, options, rich_observer, owns_run_dir=owns_run_dir)
        from phalanx.runner.observers import PlainObserver

        observer = PlainObserver(sys.stderr if output is Output.JSON else sys.stdout)
        return runner.run(spec, options, observer, owns_run_dir=owns_run_dir)
    except KeyboardInterrupt:  # the supervisor answers Ctrl-C itself once it runs: this is before
        sys.stderr.write("phalanx: interrupted before anything started\n")
        raise SystemExit(130) from None


def report_outcome(outcome: Outcome, output: Output, settings: Settings) -> NoReturn:
    """Say how it ended (and where to see it) and exit with its status."""
    if output is Output.JSON:
        emit_json(launched_json(outcome.experiment_id, str(outcome.status), outcome.reason))
    else:
        # a failure's reason may quote the replica's last lines: escaped on a terminal as its lines are
        tail = f": {for_stream(sys.stderr)(outcome.reason)}" if outcome.reason else ""
        sys.stderr.write(f"phalanx: experiment {outcome.experiment_id} {outcome.status}{tail}\n")
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
    raise SystemExit(outcome.exit_code)


def ui_hint(experiment_id: str, host: str | None = None, running: str | None = None) -> str:
    """The line `phalanx run` ends with: how to see this experiment in the web UI. ``host`` is the
    server replicas reported to (PHALANX_HOST), if any; ``running`` the URL of the `phalanx server`
    running over this machine's store (server.address.running_url); else how to start one (on its
    default port)."""
    if host or running:
        url = (host or running or "").rstrip("/")
        return f"phalanx: open {url}/experiments/{experiment_id} to see it in the web UI"
    return (
        f"phalanx: see it in the web UI: run `{_phalanx_command()} server` and open "
        f"http://127.0.0.1:8000/experiments/{experiment_id}"
    )


def _phalanx_command() -> str:
    """`phalanx` when that is what the shell finds, else the path this one was started by
    (`make run` starts `.venv/bin/phalanx`, which is not on the user's PATH)."""
    import os
    import shutil

    started = Path(sys.argv[0])
    if started.name != "phalanx":
        return "phalanx"
    try:
        os.getcwd()
    except FileNotFoundError:  # the shell's folder was removed meanwhile: nothing is relative to it
        return str(started) if started.is_absolute() else "phalanx"
    found = shutil.which("phalanx")
    if found and Path(found).resolve() == started.resolve():
        return "phalanx"
    relative = os.path.relpath(started)
    return relative if not relative.startswith("..") else str(started.resolve())


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


def warn_if_crowded(prepared: Any) -> None:
    """More local processes than cores, none of them asking for cores: say so before they start."""
    if prepared.backend.name != "local":
        return
    from phalanx.machine import limits

    replicas = [(r.name, r.resources, r.processes) for r in prepared.plan.replicas]
    warning = limits.crowding_warning(replicas, limits.machine())
    if warning:
        sys.stderr.write(f"warning: {warning}\n")
