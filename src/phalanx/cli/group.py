"""`phalanx group run|resume|stop|get|ls`: hyperparameter search where each trial is an experiment.

Only typer and the standard library at module level; Optuna is imported by the controller alone.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from phalanx.cli.app import ExtraParamsOpt, YesOpt, app, confirm
from phalanx.cli.launching import check_home_and_limits
from phalanx.cli.listing import emit_json
from phalanx.cli.target import (
    DoorTyper,
    LocalOpt,
    ServerOpt,
    ThisMachineOnlyOpt,
    submit_server,
    this_machine_only,
)
from phalanx.terminal_text import for_stream

if TYPE_CHECKING:
    from phalanx.config import Settings
    from phalanx.domain import Group
    from phalanx.groups.launching import GroupLauncher
    from phalanx.spec.group import GroupSpec
    from phalanx.store.door import Door

group_app = DoorTyper(
    help="Hyperparameter search (kind: group files): every trial is a whole experiment.",
    no_args_is_help=True,
)
app.add_typer(group_app, name="group")

IdArg = Annotated[
    str, typer.Argument(metavar="ID", help="Group id (or a unique prefix; 8 characters to stop or delete).")
]


def _load_group(
    file: Path, overrides: dict[str, Any], allow_unused: bool, extra_params: bool = False
) -> GroupSpec:
    from phalanx.errors import SpecError, UsageError
    from phalanx.spec.group import load_group
    from phalanx.spec.loader import refusal_text

    if str(file) == "-":
        raise UsageError("-f -: the group file cannot come from stdin; save it to a file and pass its path")
    try:
        return load_group(file, params=overrides, allow_unused=allow_unused, extra_params=extra_params)
    except SpecError as exc:
        sys.stderr.write(refusal_text(exc, file, "group file") + "\n")
        raise typer.Exit(2) from None


def check_group(
    file: Path, overrides: dict[str, Any], as_json: bool, allow_unused: bool, extra_params: bool = False
) -> None:
    """`phalanx check -f GROUP`: the search space and the topology of one trial."""
    from phalanx.cli.plan_table import print_plan_table
    from phalanx.errors import SpecError
    from phalanx.plan import build_plan
    from phalanx.spec.group import example_values, search_space_text

    group = _load_group(file, overrides, allow_unused, extra_params)
    for note in group.notes:
        sys.stderr.write(f"note: {note}\n")
    example = example_values(group)
    try:
        plan = build_plan(group.trial_spec(example))
    except SpecError as exc:
        for problem in exc.problems:
            sys.stderr.write(f"{problem}\n")
        raise typer.Exit(2) from None
    hp = group.hptuning
    if as_json:
        doc = plan.to_json()
        doc["topology"] = plan.topology()
        doc["world_size"] = plan.world_size
        emit_json(
            {
                "kind": "group",
                "search": hp.search.kind,
                "trials": hp.planned_trials(),
                "concurrency": hp.concurrency,
                "metric": None
                if hp.metric is None
                else {"name": hp.metric.name, "optimization": hp.metric.optimization},
                "pruning": None if hp.pruning is None else hp.pruning.kind,
                "matrix": [d.to_json() for d in hp.matrix],
                "example_trial": {"params": example, **doc},
            }
        )
        return
    typer.echo(search_space_text(group))
    shown = ", ".join(f"{k}={v}" for k, v in example.items())
    typer.echo(f"\none trial ({shown}):")
    print_plan_table(plan)


def _printer(quiet: bool) -> Any:
    def say(text: str) -> None:
        if not quiet:  # a trial's reason may quote its replica's last lines: escaped on a terminal
            sys.stderr.write(f"phalanx: {for_stream(sys.stderr)(text)}\n")
            sys.stderr.flush()

    return say


@group_app.command("run")
def run(
    file: Annotated[Path, typer.Option("-f", "--file", metavar="FILE", help="The group file (kind: group).")],
    param: Annotated[
        list[str] | None,
        typer.Option(
            "--param", metavar="NAME=VALUE", help="Override or add a param of every trial (repeatable)."
        ),
    ] = None,
    workdir: Annotated[
        Path | None,
        typer.Option("--workdir", metavar="DIR", help="Where trials start (default: the file's folder)."),
    ] = None,
    cluster: Annotated[
        str | None, typer.Option("--cluster", metavar="NAME", help="Run the trials on this cluster.")
    ] = None,
    oversubscribe: Annotated[
        bool, typer.Option("--oversubscribe", help="Pass --oversubscribe to every trial.")
    ] = False,
    allow_unused: Annotated[
        bool,
        typer.Option(
            "--allow-unused",
            help="A matrix name that looks like a typo of a placeholder is a note, not an error.",
        ),
    ] = False,
    extra_params: ExtraParamsOpt = False,
    detach: Annotated[
        bool, typer.Option("--detach", "-d", help="Run the controller in the background; print the id.")
    ] = False,
    json_out: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print the group as JSON (as group get -o json): once it ends, or as it starts (--detach).",
        ),
    ] = False,
    server: ServerOpt = None,
    local: LocalOpt = False,
) -> None:
    """Run a hyperparameter search: each trial is a whole experiment, `concurrency` at a time. After
    `phalanx login` (or with --server URL) the server runs it, and this command follows it until it
    ends (--detach: prints its id), as `phalanx run -f FILE` does with a group file.

    Exit status: 0 the search finished, 1 every trial failed, 130 stopped, 2 invalid file, 69 server or
    database unreachable.
    """
    from phalanx.config import Settings
    from phalanx.domain import plural
    from phalanx.errors import UsageError
    from phalanx.spec.loader import parse_param_overrides

    settings = Settings()
    url = submit_server(server, local, settings)
    if url is not None:  # the trials' folder and options are the server's: these are refused there
        given = {"--workdir": workdir, "--oversubscribe": oversubscribe, "--allow-unused": allow_unused}
        _submit(file, param, url, given, settings, cluster, extra_params, detach=detach, json_out=json_out)
        return
    overrides = parse_param_overrides(param or [])
    group = _load_group(file, overrides, allow_unused, extra_params)
    for note in group.notes:
        sys.stderr.write(f"note: {note}\n")
    if workdir is not None and not workdir.is_dir():
        raise UsageError(f"--workdir {workdir}: no such folder")
    if cluster is not None:
        from phalanx.clusters import get_cluster

        get_cluster(cluster, settings.home)
    check_home_and_limits(settings)
    from phalanx.groups.launching import GroupLauncher, GroupOptions

    launcher = GroupLauncher(settings)
    options = GroupOptions(
        workdir=workdir,
        params=overrides,
        cluster=cluster,
        oversubscribe=oversubscribe,
        allow_unused=allow_unused,
        extra_params=extra_params,
    )
    # refused now, nothing recorded: Optuna missing, a trial the cluster can never run, a build that fails
    record = launcher.create(group, options)
    if detach:
        launcher.start(record.id)
        if json_out:  # the group as it is now, the document a server submit of it prints
            emit_json(launcher.store.group_view(record.id))
        else:
            typer.echo(record.id)
        return
    on = f" on cluster {cluster}" if cluster else ""
    sys.stderr.write(
        f"phalanx: group {record.id}: {record.search} search, {plural(record.planned, 'trial')},"
        f" {record.concurrency} at a time{on}\n"
    )
    _drive(launcher, record.id, json_out)


def _submit(
    file: Path,
    param: list[str] | None,
    url: str,
    given: Mapping[str, object],
    settings: Settings,
    cluster: str | None,
    extra_params: bool,
    *,
    detach: bool,
    json_out: bool,
) -> None:
    """`group run` on a server: as `phalanx run -f FILE` with a group file, followed unless --detach."""
    from phalanx.cli.submit import run_on_server
    from phalanx.spec.group import is_group_file
    from phalanx.spec.loader import parse_param_overrides

    if str(file) == "-" or (file.is_file() and not is_group_file(file)):
        # what is no group file is refused as here (the server's submit would run an experiment)
        _load_group(file, parse_param_overrides(param or []), False, extra_params)
    output = "json" if json_out else "table"
    run_on_server(file, param, 0, url, not detach, None, output, given, settings, cluster, extra_params)


def _drive(launcher: GroupLauncher, group_id: str, json_out: bool, quiet: bool = False) -> None:
    done = launcher.run(group_id, say=_printer(quiet))
    if json_out:
        emit_json(launcher.store.group_view(done.id))
    raise typer.Exit({"succeeded": 0, "stopped": 130}.get(done.status, 1))


@group_app.command("resume")
def resume(
    group_id: IdArg,
    detach: Annotated[bool, typer.Option("--detach", "-d", help="Resume in the background.")] = False,
    server: ThisMachineOnlyOpt = None,
) -> None:
    """Go on with a group whose controller stopped (killed, machine restarted): finished trials are
    kept, running ones are watched again, only the missing ones are launched."""
    this_machine_only("group resume", server, "a server resumes its groups itself when it starts again")
    from phalanx.config import Settings
    from phalanx.errors import UsageError
    from phalanx.store import open_store
    from phalanx.store.group_views import controller_alive

    settings = Settings()
    check_home_and_limits(settings)
    store = open_store(settings)
    g = store.get_group(group_id)
    if g.done:  # as `phalanx resume` of a finished experiment: a mistake, said with what to do instead
        again = f"`phalanx group run -f {g.source_file}` starts a new search" if g.source_file else ""
        raise UsageError(
            f"group {g.id} already {g.status}: nothing to resume (resume goes on with a group whose"
            f" controller was killed); `phalanx group get {g.id}` shows its trials"
            + (f", {again}" if again else "")
        )
    if controller_alive(g):
        raise UsageError(
            f"group {g.id}: its controller still runs (pid {g.controller_pid}); nothing to resume"
        )
    from phalanx.groups.lock import busy, holder

    pid = holder(settings.home / "groups" / g.id)  # one still starting has not recorded its pid
    if pid is not None:
        raise UsageError(busy(g.id, pid))
    from phalanx.groups.launching import GroupLauncher

    launcher = GroupLauncher(settings, store)
    if detach:
        launcher.start(g.id)
        typer.echo(g.id)
        return
    sys.stderr.write(f"phalanx: resuming group {g.id}\n")
    _drive(launcher, g.id, False)


@group_app.command("stop")
def stop(
    group_id: IdArg,
    timeout: Annotated[float, typer.Option("--timeout", min=0, help="Seconds to wait.")] = 60.0,
    server: ServerOpt = None,
    local: LocalOpt = False,
) -> None:
    """Stop a group: no new trial starts and every running trial is stopped."""
    from phalanx.logins import choose

    client = choose(server, local)
    if client is not None:
        from phalanx.cli import remote_commands
        from phalanx.remote_store import RemoteStore

        remote_commands.stop_group(RemoteStore(client), group_id, timeout)
        return
    from phalanx.config import Settings
    from phalanx.groups import controller
    from phalanx.ids import check_destructive
    from phalanx.store import open_store

    settings = Settings()
    store = open_store(settings)
    g = store.get_group(group_id)
    check_destructive(group_id, g.id, "stop", kind="group")  # as a server does, and `phalanx stop`
    if g.done:
        typer.echo(f"group {g.id} already {g.status}")
        return
    done = controller.stop_group(store, settings, g, timeout=timeout)
    typer.echo(f"group {done.id} {done.status}")


@group_app.command("delete")
def delete(
    group_id: IdArg,
    yes: YesOpt = False,
    output: Annotated[str, typer.Option("-o", "--output", help="table or json")] = "table",
    server: ServerOpt = None,
    local: LocalOpt = False,
) -> None:
    """Delete an ended group with its trials' experiments and all they reported (not while it or one
    of them runs: `phalanx group stop` first). All or nothing."""
    from phalanx.cli.tracking import open_target
    from phalanx.config import Settings
    from phalanx.domain import plural
    from phalanx.errors import UsageError
    from phalanx.groups.ending import remove_folders
    from phalanx.ids import check_destructive

    if output not in ("table", "json"):
        raise UsageError(f"-o {output!r}: use table or json")
    store = open_target(server, local)
    doc = store.group_view(group_id)
    check_destructive(group_id, doc["id"], kind="group")
    if not yes:
        question = (
            f"Delete group {doc['id']} ({doc['name']}, {doc['status']})"
            f" and its {plural(len(doc['trials']), 'trial')}?"
        )
        confirm(question, f"deleting group {doc['id']} and its trials", "nothing deleted")
    deleted = store.remove_group(doc["id"])
    if store.server_url is None:  # a server removes its own (routes/groups.py)
        remove_folders(Settings(), doc["id"], deleted)
    if output == "json":
        emit_json({"group": doc["id"], "deleted": deleted})
        return
    typer.echo(f"deleted group {doc['id']} and its {plural(len(deleted), 'experiment')}")


def _orphaned(g: Group, doc: dict[str, Any]) -> bool:
    """A group neither ended nor created whose controller is gone: `running` alone would let a user
    wait for ever for trials that nobody launches (after `kill -9` of `group run`, or a reboot)."""
    return not g.done and g.status != "created" and not doc["controller_running"]


_ORPHANED = (
    "controller: not running (killed, or the machine restarted): no new trial starts;"
    " `phalanx group resume {id}` finishes the search, `phalanx group stop {id}` ends it"
)


@group_app.command("get")
def get(
    group_id: IdArg,
    output: Annotated[str, typer.Option("-o", "--output", help="table or json")] = "table",
    server: ServerOpt = None,
    local: LocalOpt = False,
) -> None:
    """Show a group: its trials with their params and metric, and the best trial."""
    from phalanx.cli.tracking import _table, open_target
    from phalanx.domain import plural
    from phalanx.errors import UsageError
    from phalanx.remote_store import group_of

    if output not in ("table", "json"):
        raise UsageError(f"-o {output!r}: use table or json")
    store = open_target(server, local)
    doc = store.group_view(group_id)
    if output == "json":
        emit_json(doc)
        return
    g = group_of(doc)
    orphaned = _orphaned(g, doc)
    metric = g.metric or "metric"
    typer.echo(
        f"group {g.id}  {g.name}  {g.status}  {g.search} search"
        f"  {len(doc['trials'])}/{plural(g.planned, 'trial')}"
    )
    if g.reason:
        typer.echo(f"reason: {g.reason}")
    if orphaned:
        typer.echo(_ORPHANED.format(id=g.id))
    best = doc["best"]
    names: list[str] = []
    for t in doc["trials"]:
        names += [k for k in t["params"] if k not in names]
    rows = []
    for t in doc["trials"]:
        mark = "*" if best and t["number"] == best["number"] else ""
        value = "-" if t["value"] is None else f"{t['value']:.4g}"
        rows.append(
            [f"{t['number']}{mark}", t["experiment_id"], _shown_state(store, t), value]
            + [str(t["params"].get(n, "-")) for n in names]
        )
    typer.echo(_table(["trial", "experiment", "state", metric, *names], rows))
    for t in doc["trials"]:  # why a trial has no value or was cut short (pruned, failed, stopped)
        if t["reason"] and t["reason"] != g.reason:
            typer.echo(f"trial {t['number']}: {t['reason']}")
    if best:
        typer.echo(f"best (*): trial {best['number']} ({best['experiment_id']}) {metric} {best['value']:.4g}")


def _shown_state(store: Door, trial: dict[str, Any]) -> str:
    """A running trial whose experiment still waits in this machine's queue shows `queued`: a
    `running` trial with no value for minutes looked stuck."""
    from phalanx.domain import ExperimentStatus
    from phalanx.errors import NotFound

    if trial["state"] != "running":
        return str(trial["state"])
    try:
        status = store.get_experiment(trial["experiment_id"]).status
    except NotFound:  # its launch has not created it yet
        return "starting"
    return "queued" if status is ExperimentStatus.QUEUED else "running"


@group_app.command("ls")
def ls(
    limit: Annotated[
        int, typer.Option("--limit", "-n", min=1, help="At most this many (newest first).")
    ] = 50,
    output: Annotated[str, typer.Option("-o", "--output", help="table or json")] = "table",
    server: ServerOpt = None,
    local: LocalOpt = False,
) -> None:
    """List groups, newest first (after `phalanx login`, the server's groups of your projects)."""
    from phalanx.cli.tracking import _table, _when, open_target
    from phalanx.errors import UsageError
    from phalanx.remote_store import group_of

    if output not in ("table", "json"):
        raise UsageError(f"-o {output!r}: use table or json")
    docs = open_target(server, local).group_views(limit)
    found = [(g, int(doc["trials"]), _orphaned(g, doc)) for doc in docs for g in [group_of(doc)]]
    if output == "json":
        emit_json(docs)
        return
    if not found:
        typer.echo("no groups yet: `phalanx group run -f FILE` starts one")
        return
    rows = [
        [
            g.id,
            g.name,
            f"{g.status} (no controller: group resume)" if orphaned else g.status,
            g.search,
            f"{trials}/{g.planned}",
            _when(g.created_at),
        ]
        for g, trials, orphaned in found
    ]
    typer.echo(_table(["id", "name", "status", "search", "trials", "created"], rows))
