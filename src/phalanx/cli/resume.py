"""`phalanx checkpoints ID`, `phalanx resume ID`, `phalanx rerun ID`, `phalanx diff A B`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from phalanx.cli.app import ExtraParamsOpt, OutputOpt, app, fail
from phalanx.cli.launching import check_home_and_limits, detached_json
from phalanx.cli.listing import Format, emit_json
from phalanx.cli.record_tables import human_size
from phalanx.cli.target import LocalOpt, ServerOpt
from phalanx.ids import new_id

if TYPE_CHECKING:
    from phalanx.config import Settings
    from phalanx.runner.rerunning import RerunSource
    from phalanx.store.base import LocalStore

IdArg = Annotated[str, typer.Argument(metavar="ID", help="experiment id or a unique prefix")]


def _open() -> LocalStore:
    from phalanx.config import Settings
    from phalanx.store import open_store

    return open_store(Settings())


@app.command("checkpoints")
def checkpoints(
    experiment_id: IdArg, output: OutputOpt = Format.TABLE, server: ServerOpt = None, local: LocalOpt = False
) -> None:
    """List an experiment's checkpoints (step, metrics, size, replica), the latest and the policy."""
    from phalanx.checkpoints import from_artifacts, latest
    from phalanx.cli.reading import open_target

    store = open_target(server, local)  # the server's artifact records and plan, or this machine's
    experiment = store.get_experiment(experiment_id)
    found = from_artifacts(store.artifacts(experiment.id))
    last = latest(found)
    policy = (experiment.plan or {}).get("checkpoints") or {}
    if output == "json":
        emit_json(
            {
                "experiment_id": experiment.id,
                "policy": policy,
                "checkpoints": [c.to_json() for c in found],
                "latest": last.to_json() if last else None,
            }
        )
        return
    if not found:
        typer.echo(
            f"experiment {experiment.id} has no checkpoints (task.save_checkpoint(obj, step=...) saves one)"
        )
        return
    rows = [("STEP", "NAME", "METRICS", "SIZE", "REPLICA", "")]
    for c in found:
        metrics = ", ".join(f"{k}={v:.4g}" for k, v in sorted(c.metrics.items()))
        rows.append(
            (str(c.step), c.name, metrics, human_size(c.size), c.replica, "latest" if c is last else "")
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        typer.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    if policy:
        typer.echo("retention: " + ", ".join(f"{k}={v}" for k, v in policy.items()))


def _supervise(runner: Any, prepared: Any, options: Any, output: str, *, headline: str) -> NoReturn:
    """Run a prepared experiment to its end with `phalanx run`'s terminal output; exits with its code.
    ``headline`` says what starts; the supervisor then prints its own `experiment ID (N replicas)`."""
    import sys

    from phalanx.cli.foreground import report_outcome
    from phalanx.cli.launching import Output
    from phalanx.cli.live_table import RichObserver
    from phalanx.config import Settings
    from phalanx.runner.observers import PlainObserver

    names = [r.name for r in prepared.plan.replicas]
    sys.stderr.write(f"phalanx: {headline}\n")
    tty = sys.stdout.isatty() and output == "table"
    if tty:
        with RichObserver(names) as observer:
            outcome = runner.run(prepared, options, observer, owns_run_dir=False)
    else:
        plain = PlainObserver(sys.stderr if output == "json" else sys.stdout)
        outcome = runner.run(prepared, options, plain, owns_run_dir=False)
    report_outcome(outcome, Output.JSON if output == "json" else Output.TEXT, Settings())


def _launch_of(store: LocalStore, experiment: Any) -> dict[str, Any]:
    import os

    from phalanx.runner.rerunning import launch_of

    launch = launch_of(store, experiment)
    if launch.get("system_metrics") and not os.environ.get("PHALANX_SYSTEM_METRICS"):
        # launched with --no-system-metrics (or an interval): a resume or rerun samples the same way
        os.environ["PHALANX_SYSTEM_METRICS"] = str(launch["system_metrics"])
    return launch


def _detach_resume(runner: Any, spec: Any, options: Any, output: str) -> None:
    """Resume it with its supervisor in its own session, its output appended to
    runs/<id>/supervisor.log; returns (printing the id) once that supervisor has reopened the
    experiment, bounded. Of two resumes of one experiment only the one whose supervisor won prints
    the id; the other fails with its supervisor's message (the experiment is already starting)."""
    import sys

    from phalanx.runner import StartFailed

    try:
        submitted = runner.submit(spec, options, headline=f"resuming {options.experiment_id}")
    except StartFailed as exc:
        sys.stderr.write((exc.text or f"error: the supervisor exited with status {exc.exit_code}") + "\n")
        raise typer.Exit(exc.exit_code or 1) from None
    if output == "json":
        emit_json(detached_json(submitted))
    else:
        typer.echo(submitted.experiment_id)


@app.command("resume")
def resume(
    experiment_id: IdArg,
    detach: Annotated[
        bool, typer.Option("--detach", "-d", help="Resume it in the background and print its id.")
    ] = False,
    output: OutputOpt = Format.TABLE,
    server: ServerOpt = None,
    local: LocalOpt = False,
) -> None:
    """Continue a failed or stopped experiment as a new attempt of the same experiment, from its
    latest checkpoint (PHALANX_RESUME_CHECKPOINT; task.latest_checkpoint()). Metrics continue on
    the same series. Exit status as for `phalanx run`. After `phalanx login` (or with --server) the
    server resumes its experiment on its machine and the command prints the id (`phalanx logs ID -f`
    follows it)."""
    from phalanx.logins import choose

    client = choose(server, local)
    if client is not None:
        from phalanx.cli.submit import resume_on_server

        resume_on_server(client, experiment_id, output)
        return
    from phalanx.config import Settings
    from phalanx.runner import Runner
    from phalanx.runner.resuming import resume_of

    settings = Settings()
    check_home_and_limits(settings)
    store = _open()
    experiment = store.get_experiment(experiment_id)
    planned = resume_of(store, experiment)
    _launch_of(store, experiment)  # the sampling it was launched with
    if planned.note:
        sys.stderr.write(f"note: {planned.note}\n")
    runner = Runner(settings)
    spec, options = planned.spec, planned.options
    if detach:  # every mistake above is found before it goes to the background
        _detach_resume(runner, spec, options, output)
        return
    prepared = runner.prepare(spec, options)
    _supervise(runner, prepared, options, output, headline=f"resuming {experiment.id}")


# `phalanx rerun`'s options, one alias each: the command's signature stays a readable list
RerunParamOpt = Annotated[
    list[str] | None,
    typer.Option("--param", metavar="NAME=VALUE", help="Change a param of the rerun (repeatable)."),
]
RerunDetachOpt = Annotated[
    bool, typer.Option("--detach", "-d", help="Start the rerun in the background and print its id.")
]
RerunNewExperimentIdOpt = Annotated[str | None, typer.Option("--experiment-id", hidden=True)]
RerunAttemptOpt = Annotated[
    int | None,
    typer.Option(
        "--attempt",
        min=0,
        help="Rerun what this attempt ran (`phalanx get ID` lists them); "
        "default: the last attempt that succeeded.",
    ),
]
RerunPriorityOpt = Annotated[
    int, typer.Option("--priority", help="Queue priority of the rerun (higher starts first).")
]
RerunLatestDataOpt = Annotated[
    bool,
    typer.Option(
        "--latest-data",
        help="Read the latest version of each dataset input, not the version the original read "
        "(the default: the same data).",
    ),
]
RerunServerOpt = Annotated[
    str | None,
    typer.Option(
        "--server",
        metavar="URL",
        help="Rerun on this Phalanx server (default: the one `phalanx login` chose; ID is one of its "
        "experiments); prints the new id.",
    ),
]
RerunFollowOpt = Annotated[
    bool,
    typer.Option(
        "--follow",
        help="On a server: stream the rerun's console and exit with its status, as `phalanx run"
        " --follow` does (a rerun on this machine is followed already, unless -d).",
    ),
]
RerunTokenFileOpt = Annotated[
    Path | None,
    typer.Option("--token-file", help="A file holding the server's token (default: PHALANX_TOKEN)."),
]


@app.command("rerun")
def rerun(
    experiment_id: IdArg,
    param: RerunParamOpt = None,
    extra_params: ExtraParamsOpt = False,
    detach: RerunDetachOpt = False,
    new_experiment_id: RerunNewExperimentIdOpt = None,
    attempt: RerunAttemptOpt = None,
    priority: RerunPriorityOpt = 0,
    latest_data: RerunLatestDataOpt = False,
    server: RerunServerOpt = None,
    token_file: RerunTokenFileOpt = None,
    output: OutputOpt = Format.TABLE,
    local: LocalOpt = False,
    follow: RerunFollowOpt = False,
) -> None:
    """Start a new experiment from exactly the file, params and source snapshot another one ran
    (with --param changes): by default what its last successful attempt ran (after a `phalanx
    resume` with edited code, the edited code), or what --attempt N ran. Exit status as for
    `phalanx run`; with -d, 0 once it has started. Dataset inputs read the versions the original
    read, or with --latest-data each dataset's latest version."""
    from phalanx.config import Settings
    from phalanx.logins import choose
    from phalanx.runner.rerunning import rerun_source
    from phalanx.spec.loader import parse_param_overrides

    changes = parse_param_overrides(param or [])
    client = choose(server, local, token_file)
    if client is not None:
        from phalanx.cli.submit import rerun_on_server

        if new_experiment_id is not None:
            raise fail("--experiment-id: not available on a server (the server names the rerun)")
        if detach and follow:
            raise fail("-d and --follow: give one (on a server a rerun returns at once unless --follow)")
        rerun_on_server(
            client, experiment_id, changes, priority, attempt, extra_params, output, latest_data, follow
        )
        return
    if follow:
        raise fail(
            "--follow goes with --server URL (or `phalanx login URL`): a rerun on this machine stays in"
            " the foreground until it ends already (-d sends it to the background)"
        )
    settings = Settings()
    check_home_and_limits(settings)
    store = _open()
    _launch_of(store, store.get_experiment(experiment_id))  # the sampling it was launched with
    source = rerun_source(
        store, experiment_id, changes, attempt=attempt, extra_params=extra_params, latest_data=latest_data
    )
    if source.note:
        sys.stderr.write(f"phalanx: warning: {source.note}\n")
    if new_experiment_id is not None:
        from phalanx.cli.run import _check_id

        _check_id(new_experiment_id)
    _launch_rerun(settings, source, new_experiment_id, priority, detach, output)


def _launch_rerun(
    settings: Settings,
    source: RerunSource,
    new_experiment_id: str | None,
    priority: int,
    detach: bool,
    output: str,
) -> None:
    """Start the rerun from the original's source snapshot, extracted into its own run folder;
    should anything fail before it starts, that folder is removed (nothing half-written)."""
    import shutil

    from phalanx import repro
    from phalanx.runner import Runner

    rerun_id = new_experiment_id or new_id()
    runner = Runner(settings)
    folder = settings.runs_dir / rerun_id / "source"
    headline = f"rerun of {source.origin.id} from its snapshot"
    try:
        repro.extract(source.snapshot, folder)
        options = source.options(rerun_id, folder, priority)
        if detach:  # every mistake above is found before it goes to the background
            from phalanx.cli.run import Output, submit_detached

            submit_detached(
                runner, source.spec, options, Output.JSON if output == "json" else Output.TEXT, headline
            )
            return
        prepared = runner.prepare(source.spec, options)
    except BaseException as exc:
        if isinstance(exc, typer.Exit) and exc.exit_code == 0:
            raise
        # nothing half-written: the run never started
        shutil.rmtree(folder if new_experiment_id else folder.parent, ignore_errors=True)
        raise
    _supervise(runner, prepared, options, output, headline=headline)


def _shown(value: Any) -> str:
    """A compared value for the terminal: one side without it reads "(none)", not Python's None."""
    return "(none)" if value is None else repr(value)


def _side(store: LocalStore, ref: str) -> tuple[Any, int | None]:
    """``ID`` or ``ID@N`` (attempt N of it) -> (experiment, attempt)."""
    from phalanx.errors import UsageError

    ident, sep, number = ref.partition("@")
    if sep and not number.isdigit():  # (a UsageError: its hint is given this command's door)
        raise UsageError(
            f"{ref!r}: write an attempt as ID@N, N its number (`phalanx get {ident}` lists them)"
        )
    return store.get_experiment(ident), int(number) if sep else None


def _attempt_of(store: LocalStore, exp: Any, attempt: int) -> dict[str, Any]:
    from phalanx import repro
    from phalanx.runner.rerunning import attempt_numbers, no_such_attempt

    known = attempt_numbers(store, exp.id)
    if attempt not in known:
        raise fail(no_such_attempt(exp.id, attempt, known))
    found = repro.attempt_record(store.repro(exp.id), attempt)
    if found is None:
        raise fail(
            f"attempt {attempt} of experiment {exp.id} recorded no code of its own "
            f"(`phalanx get {exp.id}` lists its attempts)"
        )
    return found


@app.command("diff")
def diff(
    a: Annotated[
        str, typer.Argument(metavar="A", help="an experiment id (or unique prefix); ID@N: its attempt N")
    ],
    b: Annotated[
        str | None,
        typer.Argument(
            metavar="[B]", help="another experiment (or ID@N); left out: A's first and last attempts"
        ),
    ] = None,
    output: OutputOpt = Format.TABLE,
    server: ServerOpt = None,
    local: LocalOpt = False,
) -> None:
    """What differs between two experiments, or two attempts of one: params, the experiment file,
    the code (their source snapshots), packages, git commit and versions. `phalanx diff ID` compares
    the first attempt of ID with its last (what a `phalanx resume` after an edit changed)."""
    from phalanx.logins import choose

    client = choose(server, local)
    if client is not None:
        from phalanx.errors import UsageError
        from phalanx.remote_store import RemoteStore

        if b is None or "@" in a or "@" in b:
            raise UsageError(
                "against a server, `phalanx diff A B` compares two experiments; the attempts of one "
                "(ID@N, or one ID) are compared on the server's machine, or with --local"
            )
        remote = RemoteStore(client)
        ea, eb = remote.get_experiment(a), remote.get_experiment(b)
        if ea.id == eb.id and output != "json":
            _nothing_to_compare(f"both sides are experiment {ea.id}", ea.id, server, local)
            return
        _print_diff(remote.diff(ea.id, eb.id), output)
        return
    store = _open()
    from phalanx import repro
    from phalanx.views import diff_doc

    ea, at_a = _side(store, a)
    at_b: int | None
    if b is None:
        from phalanx.runner.rerunning import attempt_numbers

        numbers = [int(r.get("attempt") or 0) for r in store.repro(ea.id).get("attempts") or []] or [0]
        if at_a is None and len(attempt_numbers(store, ea.id)) == 1 and output != "json":
            # nothing to compare is said, not shown as "no differences" (exit 0, like a diff of
            # what one side never recorded: named, not an error)
            _nothing_to_compare(f"experiment {ea.id} has one attempt only", ea.id, server, local)
            return
        eb, at_a, at_b = ea, at_a if at_a is not None else numbers[0], numbers[-1]
    else:
        eb, at_b = _side(store, b)
        if (ea.id, at_a) == (eb.id, at_b) and output != "json":
            side = f"experiment {ea.id}" if at_a is None else f"attempt {at_a} of experiment {ea.id}"
            _nothing_to_compare(f"both sides are {side}", ea.id, server, local)
            return
    if at_a is None and at_b is None:
        doc = diff_doc(store, ea, eb)
    else:
        ra = (
            _attempt_of(store, ea, at_a)
            if at_a is not None
            else repro.attempt_record(store.repro(ea.id), None)
        )
        rb = (
            _attempt_of(store, eb, at_b)
            if at_b is not None
            else repro.attempt_record(store.repro(eb.id), None)
        )
        labels = (
            ea.id if at_a is None else f"{ea.id}@{at_a}",
            eb.id if at_b is None else f"{eb.id}@{at_b}",
        )
        doc = diff_doc(store, ea, eb, (ra or {}, rb or {}), labels)
    _print_diff(doc, output)


def _nothing_to_compare(why: str, exp_id: str, server: str | None, local: bool) -> None:
    """What a diff with nothing to compare says (`phalanx diff X X`; X with one attempt only): why,
    on stdout with exit 0 (named, not an error, as a diff of what a side never recorded is), and
    how to compare it with another, on the door given."""
    from phalanx.cli.target import on_door

    typer.echo(
        on_door(
            f"{why}: nothing to compare (`phalanx diff {exp_id} OTHER` compares it with another experiment)",
            server,
            local,
        )
    )


def _print_diff(doc: dict[str, Any], output: str) -> None:
    if output == "json":
        emit_json(doc)
        return
    out = [f"diff {doc['a']} {doc['b']}"]
    for title, key in (
        ("params", "params"),
        ("packages", "packages"),
        ("git", "git"),
        ("versions", "versions"),
        ("data", "data"),
    ):
        if doc[key]:
            out.append(f"{title}:")
            out.extend(f"  {k}: {_shown(v['a'])} -> {_shown(v['b'])}" for k, v in doc[key].items())
    if doc["file"]:
        out.append("experiment file:")
        out.extend(f"  {line}" for line in doc["file"])
    if doc["code"]:
        out.append("code:")
        out.extend(f"  {line}" for line in doc["code"])
    for side in ("a", "b"):  # each side as the diff names it: ID, or ID@N for an attempt
        missing = doc["unrecorded"].get(side)
        if missing:
            out.append(
                f"not compared: {doc[side]} recorded no {', '.join(missing)} "
                "(a plain script's run, or one recorded before Phalanx kept them)"
            )
    if len(out) == 1:
        out.append("no differences in params, file, code, packages, versions or data")
    typer.echo("\n".join(out))
