"""Starting an experiment in the background (`phalanx run --detach`), and the checks `run`,
`rerun` and `group run` share. No typer here: cli/lean.py runs a plain `phalanx run -f FILE --detach`
through ``start_detached`` without importing typer and its pydantic adapters (issue 30,
docs/cli-speed.md); the Typer command (cli/run.py) calls the same function. A foreground run is
cli/foreground.py's.
"""

from __future__ import annotations

import os
import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from phalanx.cli.listing import emit_json

if TYPE_CHECKING:
    from phalanx.config import Settings
    from phalanx.runner import LaunchOptions, Runner
    from phalanx.runner.running import Submitted
    from phalanx.spec.model import ExperimentSpec


class Output(StrEnum):
    TEXT = "text"
    JSON = "json"
    YAML = "yaml"  # with --dry-run on a cluster: the engine's own render (Kubernetes YAML, sbatch)


def _load(file: Path, param: list[str] | None, extra_params: bool = False) -> Any:
    from phalanx.errors import SpecError
    from phalanx.spec.loader import load_spec, parse_param_overrides, refusal_text

    _refuse_stdin(file)
    overrides = parse_param_overrides(param or [])
    try:
        return load_spec(file, params=overrides, extra_params=extra_params)
    except SpecError as exc:
        sys.stderr.write(refusal_text(exc, file) + "\n")
        raise SystemExit(2) from None


def _refuse_stdin(file: Path) -> None:
    from phalanx.errors import UsageError

    if str(file) == "-":
        raise UsageError(
            "-f -: the experiment file cannot come from stdin; save it to a file and pass its path"
        )


# Open files a supervisor needs with a few replicas (its store, spool, logs and the tails that follow
# them); under about 20 it loses lines or fails half-way (issue 42's QA), so a lower `ulimit -n` is
# refused before anything starts.
OPEN_FILES_NEEDED = 64


def check_home_and_limits(settings: Settings) -> None:
    """PHALANX_HOME and PHALANX_DB_URL mistakes, and a `ulimit -n` too low to supervise anything,
    found before any replica starts (the store itself is opened only once they are starting). A
    string check: SQLAlchemy is not imported here."""
    import resource

    from phalanx.errors import UsageError

    allowed = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if allowed != resource.RLIM_INFINITY and allowed < OPEN_FILES_NEEDED:
        raise UsageError(
            f"this shell lets a process open {allowed} files (`ulimit -n`); a run needs at least"
            f" {OPEN_FILES_NEEDED}: raise it, e.g. `ulimit -n 1024`, and run again"
        )
    if settings.home.exists() and not settings.home.is_dir():
        raise UsageError(f"PHALANX_HOME {settings.home} is a file; point PHALANX_HOME at a folder")
    url = settings.database_url
    scheme = url.split("://", 1)[0].split("+", 1)[0] if "://" in url else ""
    if scheme not in ("sqlite", "postgresql", "postgres"):
        raise UsageError(
            f"PHALANX_DB_URL {url!r} is not a database URL; use sqlite:///PATH or postgresql://..."
        )


def _check_id(experiment_id: str) -> None:
    import re

    from phalanx.errors import UsageError

    if not re.fullmatch(r"[0-9a-f]{12}", experiment_id):
        raise UsageError(f"--experiment-id {experiment_id!r}: expected 12 lowercase hex characters")


def check_request(experiment_id: str | None, priority: int, output: Output, dry_run: bool = False) -> None:
    """`phalanx run`'s options that are wrong whatever the file says (exit 2): a malformed
    --experiment-id, a --priority out of range, -o yaml without --dry-run."""
    from phalanx.errors import UsageError
    from phalanx.priority import check_priority

    if experiment_id is not None:
        _check_id(experiment_id)
    check_priority(priority, "--priority")
    if output is Output.YAML and not dry_run:
        raise UsageError("-o yaml shows what --dry-run would submit: add --dry-run, or use -o text or json")


def submit_detached(
    runner: Runner,
    spec: ExperimentSpec,
    options: LaunchOptions,
    output: Output,
    headline: str | None = None,
    fork: bool = False,
) -> None:
    """Start the experiment's supervisor in its own session (its output in runs/<id>/supervisor.log;
    ``fork``: forked from this process, ``Runner.submit``), wait (bounded) until the experiment
    exists and print its id. If the supervisor ends before, its own messages are shown and its exit
    status is ours (its run folder is removed: nothing half-written). A Ctrl-C meanwhile names the
    experiment, which may have started and runs on (``options.experiment_id``: given by the caller)."""
    from phalanx.runner import StartFailed

    try:
        submitted = runner.submit(spec, options, headline=headline, fork=fork)
    except StartFailed as exc:
        sys.stderr.write((exc.text or f"error: the supervisor exited with status {exc.exit_code}") + "\n")
        raise SystemExit(exc.exit_code or 1) from None
    except KeyboardInterrupt:
        exp_id = options.experiment_id
        if exp_id is None:
            raise
        sys.stderr.write(
            f"phalanx: interrupted; experiment {exp_id} may have started, and then it runs on: "
            f"`phalanx get {exp_id}` shows it, `phalanx stop {exp_id}` stops it\n"
        )
        raise SystemExit(130) from None
    if output is Output.JSON:
        emit_json(detached_json(submitted))
    else:
        sys.stdout.write(f"{submitted.experiment_id}\n")
        sys.stdout.flush()


def detached_json(submitted: Submitted) -> dict[str, Any]:
    """``launched_json`` of a supervisor started in the background on this machine."""
    return launched_json(
        submitted.experiment_id,
        submitted.status,
        submitted.reason,
        supervisor_pid=submitted.process.pid,
        log=submitted.log,
    )


def launched_json(
    experiment_id: str,
    status: str,
    reason: str | None = None,
    *,
    server: str | None = None,
    supervisor_pid: int | None = None,
    log: Path | None = None,
) -> dict[str, Any]:
    """What `phalanx run`, `rerun` and `resume` print with ``-o json``: one shape on every door
    (docs/running.md, "What `-o json` prints"). ``status`` (and ``reason``) as the experiment stood
    when the command returned: its end once it waited for it, else its status once it existed.
    Every key is always there; those only one door knows are null on the other: ``server`` (the
    server it runs on), ``supervisor_pid`` and ``log`` (a supervisor started in the background on
    this machine)."""
    return {
        "id": experiment_id,
        "status": status,
        "reason": reason,
        "server": server,
        "supervisor_pid": supervisor_pid,
        "log": None if log is None else str(log),
    }


def start_detached(
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
) -> None:
    """`phalanx run --detach`: every mistake found before the experiment exists and anything starts
    (exit 2), then its supervisor forked from this process, in its own session (``Runner.fork``:
    the file validated and the modules imported once for the whole submission, issue 42); prints
    the experiment's id (or JSON with ``output``) once it exists."""
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
    from dataclasses import replace

    from phalanx.ids import new_id
    from phalanx.runner import Runner

    # its id decided here: a Ctrl-C while it starts can name it (``submit_detached``)
    options = replace(options, experiment_id=options.experiment_id or new_id())
    submit_detached(Runner(settings), spec, options, output, fork=True)


def prepare_launch(
    file: Path,
    *,
    param: list[str] | None,
    extra_params: bool,
    workdir: Path | None,
    oversubscribe: bool,
    cluster: str | None,
    priority: int,
    no_wait: bool,
    no_system_metrics: bool,
    experiment_id: str | None,
    settings: Settings,
    check_home: bool = True,
) -> tuple[Any, LaunchOptions]:
    """The file loaded (its notes shown) and `phalanx run`'s options as the runner takes them: the
    mistakes of both found before anything starts (``check_home``: not for a dry run)."""
    spec = _load(file, param, extra_params)
    for note in getattr(spec, "notes", ()):
        sys.stderr.write(f"note: {note}\n")
    options = launch_options(
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
        check_home=check_home,
    )
    return spec, options


def launch_options(
    file: Path,
    *,
    param: list[str] | None,
    workdir: Path | None,
    oversubscribe: bool,
    cluster: str | None,
    priority: int,
    no_wait: bool,
    no_system_metrics: bool,
    experiment_id: str | None,
    settings: Settings,
    check_home: bool = True,
) -> LaunchOptions:
    """`phalanx run`'s options as the runner takes them, after the mistakes found before anything
    starts (no such --workdir, an unknown --cluster, an unusable home, a malformed PHALANX_* knob)."""
    from phalanx import knobs
    from phalanx.errors import UsageError
    from phalanx.runner import LaunchOptions, LaunchRecord
    from phalanx.spec.params import parse_param_overrides

    if workdir is not None and not workdir.is_dir():
        raise UsageError(f"--workdir {workdir}: no such folder")
    if workdir is not None and not os.access(workdir, os.X_OK):
        raise UsageError(f"--workdir {workdir}: this account may not enter it; fix its permissions")
    knobs.check()
    if cluster is not None:
        from phalanx.clusters import get_cluster

        get_cluster(cluster, settings.home)
    if check_home:
        check_home_and_limits(settings)
    return LaunchOptions(
        workdir=workdir.resolve() if workdir is not None else None,
        cluster=cluster,
        oversubscribe=oversubscribe,
        priority=priority,
        wait=not no_wait,
        experiment_id=experiment_id,
        system_metrics="off" if no_system_metrics else None,
        # what `phalanx rerun` and `phalanx resume` start again from
        record=LaunchRecord(file=str(file.resolve()), params=parse_param_overrides(param or [])),
    )
