"""Reading what experiments reported: `phalanx ls`, `metrics`, `params`, `artifacts`, `gc`
(`get` is in cli/details.py, `delete` in cli/delete.py). Each takes `-o json` for scripts (one
JSON document on stdout).

Every read first runs one ingest pass over the pending spools, so what a script reported is shown
even when the ingester that should have stored it died. Only typer and the standard library are
imported at module level; the store is imported inside the commands.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from phalanx.cli.app import OutputOpt, app, choice_option
from phalanx.cli.details import show_experiment

# the lean `phalanx ls` path lives in cli/listing.py (no typer); other modules import these from here
from phalanx.cli.listing import Format as Format
from phalanx.cli.listing import _duration as _duration
from phalanx.cli.listing import _table as _table
from phalanx.cli.listing import _when as _when
from phalanx.cli.listing import emit_json, ls_experiments
from phalanx.cli.listing import open_for_reading as open_for_reading
from phalanx.cli.metrics_output import print_metrics

# shared with cli/details.py; other command modules import some of them from here
from phalanx.cli.reading import IdArg as IdArg
from phalanx.cli.reading import open_target as open_target
from phalanx.cli.record_tables import artifacts_of_kind, human_size, print_artifacts, print_params
from phalanx.cli.target import LocalOpt, ServerOpt, ThisMachineOnlyOpt, this_machine_only


class MetricsFormat(StrEnum):
    TABLE = "table"
    JSON = "json"
    CSV = "csv"


# --- commands ------------------------------------------------------------------------------------


@app.command("ls")
def ls(
    status: Annotated[
        str | None,
        typer.Option(
            "--status", metavar="STATUS", help="Only experiments in this status (running, failed, ...)."
        ),
    ] = None,
    project: Annotated[
        str | None, typer.Option("--project", metavar="NAME", help="Only this project.")
    ] = None,
    search: Annotated[
        str | None, typer.Option("--search", metavar="TEXT", help="Text in the id, name or project.")
    ] = None,
    limit: Annotated[
        int, typer.Option("--limit", "-n", min=1, help="At most this many (newest first).")
    ] = 50,
    output: OutputOpt = Format.TABLE,
    group: Annotated[
        str | None, typer.Option("--group", metavar="ID", help="Only the trials of this experiment group.")
    ] = None,
    tag: Annotated[
        str | None, typer.Option("--tag", metavar="TAG", help="Only experiments with this tag.")
    ] = None,
    server: ServerOpt = None,
    local: LocalOpt = False,
    where: Annotated[
        list[str] | None,
        typer.Option(
            "--where",
            metavar="FILTER",
            help='Only those the filter keeps, e.g. "metric:min:loss < 0.5 and (param:lr > 0.01 or '
            'param:opt in (adam, sgd))"; repeatable, all must hold.',
        ),
    ] = None,
    column: Annotated[
        list[str] | None,
        typer.Option(
            "--column",
            metavar="COLUMN",
            help="Also show param:KEY, metric:AGG:TITLE or metric:AGG:TITLE@rankN (repeatable).",
        ),
    ] = None,
) -> None:
    """List experiments, newest first.

    --where keeps those the run table's filter keeps (and, or, parentheses, in (...)), e.g.
    --where "metric:min:loss < 0.5 and param:lr > 0.01"; --column adds a param:KEY or
    metric:AGG:TITLE (AGG last, min or max) column; metric:AGG:TITLE@rankN is rank N's series
    only. After `phalanx login` (or with --server) the server filters.
    """
    from phalanx.logins import choose

    client = choose(server, local)
    remote = None
    if client is not None:
        from phalanx.remote_store import RemoteStore

        remote = RemoteStore(client)  # --where/--column: the server's run table (GET /experiments)
    ls_experiments(
        status=status,
        project=project,
        search=search,
        limit=limit,
        output=output,
        group=group,
        tag=tag,
        where=where,
        columns=column,
        store=remote,
    )


@app.command("get")
def get(
    experiment_id: IdArg,
    output: OutputOpt = Format.TABLE,
    file: Annotated[
        bool, typer.Option("--file", help="Print only the experiment file it was launched with.")
    ] = False,
    server: ServerOpt = None,
    local: LocalOpt = False,
) -> None:
    """Show one experiment: status, times, how it was launched (file, --param values, each replica's
    command), replicas, parameters, artifacts and metrics."""
    show_experiment(open_target(server, local), experiment_id, output, file)


@app.command("metrics")
def metrics(
    experiment_id: IdArg,
    title: Annotated[
        str | None, typer.Option("--title", metavar="TITLE", help="Only this title (e.g. loss).")
    ] = None,
    series: Annotated[
        str | None, typer.Option("--series", metavar="SERIES", help="Only this series (e.g. 'worker 00').")
    ] = None,
    output: Annotated[
        MetricsFormat, choice_option(MetricsFormat, "-o", "--output", help="table, json or csv")
    ] = MetricsFormat.TABLE,
    server: ServerOpt = None,
    local: LocalOpt = False,
) -> None:
    """Scalars an experiment reported. json: {"loss": {"worker 00": {"steps": [...], "values": [...]}}}."""
    store = open_target(server, local)
    print_metrics(store, store.get_experiment(experiment_id).id, title, series, output.value)


@app.command("params")
def params(
    experiment_id: IdArg,
    output: OutputOpt = Format.TABLE,
    server: ServerOpt = None,
    local: LocalOpt = False,
) -> None:
    """Hyperparameters by section: Declared (the file's params after --param, an estimator's
    script_params; a group trial's are in Trial), Args from argparse, General from task.connect,
    ... A declared value the script reported differently is marked in the table's last column."""
    store = open_target(server, local)
    print_params(store, store.get_experiment(experiment_id).id, output.value)


@app.command("artifacts")
def artifacts(
    experiment_id: IdArg,
    download: Annotated[
        str | None, typer.Option("--download", metavar="NAME", help="Fetch this artifact.")
    ] = None,
    directory: Annotated[
        Path, typer.Option("-d", "--dir", metavar="DIR", help="Where --download writes.")
    ] = Path("."),
    output: OutputOpt = Format.TABLE,
    kind: Annotated[
        str | None,
        typer.Option(
            "--kind",
            metavar="KIND",
            help="Only this kind: 'report' lists the Logger's images, histograms, tables and plots.",
        ),
    ] = None,
    server: ServerOpt = None,
    local: LocalOpt = False,
) -> None:
    """List an experiment's artifacts, or download one with --download NAME [-d DIR].

    --kind report lists what logger.report_image/histogram/table/matplotlib_figure/plotly stored,
    named report/KIND/TITLE/SERIES/STEP@rankN (-o json adds their title, series, step and rank)."""
    from phalanx.errors import NotFound

    store = open_target(server, local)
    e = store.get_experiment(experiment_id)
    records = artifacts_of_kind(store, e.id, kind)
    if download is not None:
        chosen = next((a for a in records if a.name == download), None)
        if chosen is None:
            names = ", ".join(repr(a.name) for a in records) or "none"
            raise NotFound(f"experiment {e.id} has no artifact {download!r} (artifacts: {names})")
        target = store.download_artifact(e.id, chosen, directory)
        if output is Format.JSON:
            emit_json({"name": chosen.name, "path": str(target)})
        else:
            typer.echo(str(target))
        return
    print_artifacts(records, e.id, kind, output.value)


@app.command("gc")
def gc(
    min_age: Annotated[
        float,
        typer.Option(
            "--min-age",
            metavar="SECONDS",
            min=0,
            help="Leave orphaned folders younger than this (a run that is just starting has one).",
        ),
    ] = 600.0,
    output: OutputOpt = Format.TABLE,
    server: ThisMachineOnlyOpt = None,
) -> None:
    """Remove what no experiment on this machine needs (run folders and spools of deleted or
    never-recorded experiments, ingested spools of finished ones) and compact its store (VACUUM)."""
    from phalanx.gc import collect

    this_machine_only(
        "gc", server, "run it on the server's machine, or let `phalanx server --gc-hours N` sweep it"
    )

    store, settings = open_for_reading()
    done = collect(store, settings, min_age=min_age)
    if output is Format.JSON:
        emit_json(done.to_json())
        return
    lines = [
        f"removed {len(done.run_folders)} run folder(s), {len(done.spool_folders)} spool folder(s) and "
        f"{len(done.spool_files)} spool file(s): {human_size(done.bytes_freed)} freed"
    ]
    if done.bundles or done.work_folders:  # only a server's home has uploads
        lines.append(
            f"removed {len(done.bundles)} uploaded code bundle(s) and {len(done.work_folders)} "
            "working folder(s) no experiment needs"
        )
    if done.store_bytes_before is not None and done.store_bytes_after is not None:
        before, after = human_size(done.store_bytes_before), human_size(done.store_bytes_after)
        lines.append(f"store compacted: {before} -> {after}")
    else:
        lines.append("store compacted (VACUUM)")
    typer.echo("\n".join(lines))
