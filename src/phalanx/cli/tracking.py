"""Reading what experiments reported: `phalanx ls`, `get`, `metrics`, `params`, `artifacts`
(`delete` is in cli/delete.py). Each takes `-o json` for scripts (one JSON document on stdout).

Every read first runs one ingest pass over the pending spools, so what a script reported is shown
even when the ingester that should have stored it died. Only typer and the standard library are
imported at module level; the store is imported inside the commands.
"""

from __future__ import annotations

import csv
import math
import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from phalanx.cli.app import app, emit_json

# the lean `phalanx ls` path lives in cli/listing.py (no typer); other modules import these from here
from phalanx.cli.listing import Format as Format
from phalanx.cli.listing import _duration as _duration
from phalanx.cli.listing import _table as _table
from phalanx.cli.listing import _when as _when
from phalanx.cli.listing import ls_experiments
from phalanx.cli.listing import open_for_reading as open_for_reading
from phalanx.cli.target import LocalOpt, ServerOpt
from phalanx.views import PER_REPLICA, params_by_section, run_details

if TYPE_CHECKING:
    from phalanx.domain import Experiment, Replica
    from phalanx.store.base import ArtifactRecord, Store

IdArg = Annotated[str, typer.Argument(metavar="ID", help="Experiment id or a unique prefix of one.")]


class MetricsFormat(StrEnum):
    TABLE = "table"
    JSON = "json"
    CSV = "csv"


def open_target(server: str | None = None, local: bool = False) -> Any:
    """The store a read or control command works on: a server's (``RemoteStore``, after `phalanx
    login` or with --server) or this machine's (after one ingest pass, ``open_for_reading``)."""
    from phalanx.cli.target import choose

    client = choose(server, local)
    if client is None:
        return open_for_reading()[0]
    from phalanx.cli.remote_store import RemoteStore

    return RemoteStore(client)


def is_remote(store: Any) -> bool:
    from phalanx.cli.remote_store import RemoteStore

    return isinstance(store, RemoteStore)


def details_of(store: Any, experiment_id: str) -> dict[str, Any]:
    """Attempts, source and pace (``views.run_details``), from the server's /run when remote."""
    return store.run_details(experiment_id) if is_remote(store) else run_details(store, experiment_id)


# --- formatting ----------------------------------------------------------------------------------


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def experiment_json(e: Experiment) -> dict[str, Any]:
    return e.to_json()


def replica_json(r: Replica) -> dict[str, Any]:
    return r.to_json()


def finite_or_none(values: list[float]) -> list[float | None]:
    """Strict JSON has no NaN/Infinity (jq, JavaScript reject them): -o json writes null instead."""
    if all(map(math.isfinite, values)):
        return values  # type: ignore[return-value]
    return [v if math.isfinite(v) else None for v in values]


def artifact_json(a: ArtifactRecord) -> dict[str, Any]:
    return {
        "name": a.name,
        "kind": a.kind,
        "path": a.path,
        "size": a.size,
        "content_type": a.content_type,
        "replica": a.replica,
        "rank": a.rank,
        "time": a.time,
        "metadata": dict(a.metadata),
    }


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
    output: Annotated[Format, typer.Option("-o", "--output", help="table or json")] = Format.TABLE,
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
            metavar="CONDITIONS",
            help='Only those meeting every condition, e.g. "metric:min:loss < 0.5 and param:lr > 0.01".',
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

    --where keeps those that meet every condition of the run table's grammar, e.g.
    --where "metric:min:loss < 0.5 and param:lr > 0.01"; --column adds a param:KEY or
    metric:AGG:TITLE (AGG last, min or max) column; metric:AGG:TITLE@rankN is rank N's series
    only. After `phalanx login` (or with --server) the server filters.
    """
    from phalanx.cli.target import choose

    client = choose(server, local)
    remote = None
    if client is not None:
        from phalanx.cli.remote_store import RemoteStore

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


def _queue_place(experiment_id: str) -> str:
    """Where a queued experiment stands in this machine's queue (`phalanx queue` shows them all)."""
    from phalanx.config import Settings
    from phalanx.queue import ledger_for

    _, waiting, _ = ledger_for(Settings()).snapshot()
    for i, entry in enumerate(waiting, 1):
        if entry.experiment_id == experiment_id:
            return f"position {i} of {len(waiting)}, priority {entry.priority}, needs {entry.need.describe()}"
    return "not waiting on this machine (see `phalanx queue`)"


def _code_note(attempt: dict[str, Any]) -> str:
    """What an attempt's recorded code changed, for the attempts table."""
    changed = (attempt.get("code") or {}).get("changed")
    if changed is None:
        return ""
    if not changed:
        return "; same code"
    shown = ", ".join(changed[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
    return f"; code changed: {shown} (`phalanx diff ID` shows how)"


def run_details_text(details: dict[str, Any]) -> list[str]:
    out: list[str] = []
    attempts = details.get("attempts") or []
    if len(attempts) > 1:
        out += ["", "attempts:"]
        for a in attempts:
            step = f" from checkpoint step {a['checkpoint_step']}" if a["checkpoint_step"] is not None else ""
            why = f" ({a['reason'].splitlines()[0]})" if a.get("reason") else ""
            out.append(f"  {a['number']}  {a['kind']}{step}: {a['status']}{why}{_code_note(a)}")
    pods = details.get("pod_attempts") or {}
    if pods:  # pods Kubernetes restarted by itself: each start asked the server for its attempt
        out += ["", "pod attempts: " + ", ".join(f"{name} {n}" for name, n in pods.items())]
    source = details.get("source")
    if source:
        git = source.get("git") or {}
        where = (
            f"git {str(git.get('commit'))[:12]} ({git.get('branch')})"
            + (" + uncommitted changes" if git.get("dirty") else "")
            + (f", as the snapshot of {git['from']} recorded it" if git.get("from") else "")
            if git
            else "not a git work tree"
        )
        out += [
            "",
            f"source:    {where}; python {source.get('python')}, phalanx {source.get('phalanx')}, "
            f"{source.get('packages')} packages, host {source.get('host')}",
        ]
        from phalanx import repro

        note = repro.left_out_note(source.get("snapshot"))
        if note:  # a capped snapshot must say so where the user looks, not only in -o json
            out.append(f"snapshot:  {note}")
    pace_doc = details.get("pace")
    if pace_doc and pace_doc.get("ranks"):
        out += ["", f"pace ({pace_doc['title']}):"]
        for r in pace_doc["ranks"]:
            silent = f", no step for {r['silent_seconds']:.0f} s" if r.get("silent_seconds") else ""
            out.append(
                f"  {r['replica']:<12} {r['steps_per_second']:.3g} steps/s  (step {r['last_step']}{silent})"
            )
        if pace_doc.get("straggler"):
            s = pace_doc["straggler"]
            out.append(
                f"  straggler: {s['replica']} at {s['steps_per_second']:.3g} steps/s, "
                f"{s['behind_percent']:.0f} % below the median"
            )
    return out


@app.command("get")
def get(
    experiment_id: IdArg,
    output: Annotated[Format, typer.Option("-o", "--output", help="table or json")] = Format.TABLE,
    file: Annotated[
        bool, typer.Option("--file", help="Print only the experiment file it was launched with.")
    ] = False,
    server: ServerOpt = None,
    local: LocalOpt = False,
) -> None:
    """Show one experiment: status, times, how it was launched (file, --param values, each replica's
    command), replicas, parameters, artifacts and metrics."""
    store = open_target(server, local)
    e = store.get_experiment(experiment_id)
    launch = _launch(e)
    if file:
        if e.spec_text is None:
            from phalanx.errors import UsageError

            raise UsageError(f"experiment {e.id} was not launched from a file (Task.init or an estimator)")
        sys.stdout.write(e.spec_text if e.spec_text.endswith("\n") else e.spec_text + "\n")
        return
    replicas = store.list_replicas(e.id)
    params = params_by_section(store.params(e.id))
    artifacts = store.artifacts(e.id)
    titles = store.metric_titles(e.id)
    models = store.models(e.id)
    if output is Format.JSON:
        doc = experiment_json(e)
        doc.update(
            launch=launch,
            spec_text=e.spec_text,
            replicas=[replica_json(r) for r in replicas],
            params=params,
            artifacts=[artifact_json(a) for a in artifacts],
            metrics=titles,
            models=[{"name": m.name, "format": m.format, "path": m.path, "size": m.size} for m in models],
            notes=e.notes,
            reports=store.texts(e.id),
        )
        doc.update(details_of(store, e.id))
        from phalanx.data.lineage import inputs_of

        doc["inputs"] = inputs_of(e.plan)  # the dataset versions and datastores it read
        emit_json(doc)
        return
    out = _summary_lines(store, e, launch)
    out.extend(_replica_and_param_lines(replicas, params))
    out.extend(_content_lines(store, e, artifacts, models, titles))
    typer.echo("\n".join(out))


def _summary_lines(store: Store, e: Experiment, launch: dict[str, Any]) -> list[str]:
    """`phalanx get`'s head: status, times, where it runs and how it was launched."""
    out = [
        f"id:        {e.id}",
        f"name:      {e.name}",
        f"project:   {e.project}",
        *([f"kind:      {e.kind} (phalanx serve: requests, latency)"] if e.kind == "service" else []),
        f"status:    {e.status}" + (f" ({e.reason})" if e.reason else ""),
        f"created:   {_when(e.created_at)}",
        f"started:   {_when(e.started_at)}",
        f"finished:  {_when(e.finished_at)}",
        f"duration:  {_duration(e.started_at, e.finished_at)}",
    ]
    if e.framework or e.backend:
        out.append(
            f"runs on:   {e.framework or '-'} / {e.backend or '-'}" + (f" / {e.cluster}" if e.cluster else "")
        )
    if e.tags:
        out.append(f"tags:      {', '.join(e.tags)}")
    if launch["file"] or e.spec_text:
        out.append(f"file:      {launch['file'] or '(text kept)'}  (phalanx get {e.id} --file prints it)")
    if launch["params"]:
        given = " ".join(f"{k}={_value(v)}" for k, v in launch["params"].items())
        out.append(f"--param:   {given}")
    if launch["commands"]:
        out.append("")
        out.append("commands:")
        out.extend(f"  {name}: {command}" for name, command in launch["commands"].items())
    if str(e.status) == "queued":
        place = "waiting in the server's queue" if is_remote(store) else _queue_place(e.id)
        out.append(f"queue:     {place}")
    if e.notes:
        out.append("notes:     " + e.notes.replace("\n", "\n           "))
    return out


def _replica_and_param_lines(replicas: list[Replica], params: dict[str, dict[str, Any]]) -> list[str]:
    out = ["", "replicas:"]
    rows = [[r.name, _opt(r.rank), str(r.state), _opt(r.exit_code), r.reason or ""] for r in replicas]
    out.append(_indent(_table(["name", "rank", "state", "exit", "reason"], rows)) if rows else "  (none)")
    out.append("")
    out.append("parameters:")
    if not params:
        out.append("  (none)")
    for section, values in sorted(params.items()):
        out.append(f"  {section}:")
        out.extend(f"    {k} = {_value(v)}" for k, v in sorted(values.items()))
    return out


def _content_lines(
    store: Store,
    e: Experiment,
    artifacts: list[ArtifactRecord],
    models: list[Any],
    titles: dict[str, list[str]],
) -> list[str]:
    """What it produced: artifacts, models, metrics, text reports, run details and its data inputs."""
    out = ["", "artifacts:"]
    out.extend(f"  {a.name}  ({a.kind}, {_size(a.size)}, from {a.replica})" for a in artifacts)
    if not artifacts:
        out.append("  (none)")
    if models:
        out.append("")
        out.append("models:")
        out.extend(f"  {m.name}  ({m.format}, {_size(m.size)})" for m in models)
    out.append("")
    out.append("metrics:")
    out.extend(f"  {t}: {', '.join(series)}" for t, series in titles.items())
    if not titles:
        out.append("  (none)")
    texts = store.texts(e.id)
    if texts:
        out.append("")
        out.append(f"reports ({len(texts)}; `phalanx reports {e.id}` shows them all):")
        for t in texts[-3:]:
            first = t["text"].splitlines()[0] if t["text"] else ""
            out.append(f"  {t['title'] or 'text'}: {first[:100]}")
    out.extend(run_details_text(details_of(store, e.id)))
    from phalanx.data.lineage import inputs_text

    out.extend(inputs_text(e.plan))
    return out


def _launch(e: Experiment) -> dict[str, Any]:
    """How it was launched (kept with the plan since #10; older experiments show the plan's command)."""
    plan = dict(e.plan or {})
    launch = dict(plan.get("launch") or {})
    commands = launch.get("commands")
    if not commands and plan.get("command"):
        commands = {r.get("name", "?"): plan["command"] for r in plan.get("replicas", [])}
    return {
        "file": launch.get("file"),
        "params": dict(launch.get("params") or {}),
        "commands": commands or {},
    }


def _opt(value: int | None) -> str:
    return "-" if value is None else str(value)


def _indent(text: str) -> str:
    return "\n".join(f"  {line}" for line in text.splitlines())


def _writer(replica: str, rank: int | None) -> str:
    return replica if rank is None else f"{replica} rank {rank}"


def _value(v: Any) -> str:
    import json

    if isinstance(v, dict) and list(v) == [PER_REPLICA]:  # ranks differ: each value with its writer
        return ", ".join(f"{_value(r['value'])} ({_writer(r['replica'], r['rank'])})" for r in v[PER_REPLICA])
    return v if isinstance(v, str) else json.dumps(v)


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
        MetricsFormat, typer.Option("-o", "--output", help="table, json or csv")
    ] = MetricsFormat.TABLE,
    server: ServerOpt = None,
    local: LocalOpt = False,
) -> None:
    """Scalars an experiment reported. json: {"loss": {"worker 00": {"steps": [...], "values": [...]}}}."""
    from phalanx.errors import NotFound

    store = open_target(server, local)
    e = store.get_experiment(experiment_id)
    data = store.metrics(e.id, title=title, series=series)
    if (title is not None or series is not None) and not data:
        known = ", ".join(store.metric_titles(e.id)) or "none"
        which = (
            f"series {series!r}"
            if title is None
            else repr(title)
            if series is None
            else f"{title!r}/{series!r}"
        )
        raise NotFound(f"experiment {e.id} has no metric {which} (titles: {known})")
    if output is MetricsFormat.JSON:
        emit_json(
            {
                t: {s: {"steps": v.steps, "values": finite_or_none(v.values)} for s, v in by.items()}
                for t, by in data.items()
            }
        )
    elif output is MetricsFormat.CSV:
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(["title", "series", "step", "value", "time"])
        for t, by in data.items():
            for s, v in by.items():
                times: list[float | None] = list(v.times) or [None] * len(v.steps)
                writer.writerows(
                    [t, s, st, val, tm] for st, val, tm in zip(v.steps, v.values, times, strict=True)
                )
        sys.stdout.flush()
    else:
        rows = [
            [t, s, str(len(v.steps)), str(v.steps[-1]), f"{v.values[-1]:.6g}", f"{min(v.values):.6g}",
             f"{max(v.values):.6g}"]
            for t, by in data.items()
            for s, v in by.items()
        ]  # fmt: skip
        if not rows:
            typer.echo(f"experiment {e.id} reported no metrics yet")
            return
        typer.echo(_table(["title", "series", "points", "last step", "last", "min", "max"], rows))


@app.command("params")
def params(
    experiment_id: IdArg,
    output: Annotated[Format, typer.Option("-o", "--output", help="table or json")] = Format.TABLE,
    server: ServerOpt = None,
    local: LocalOpt = False,
) -> None:
    """Hyperparameters by section (Args from argparse, General from task.connect, ...)."""
    store = open_target(server, local)
    e = store.get_experiment(experiment_id)
    records = store.params(e.id)
    if output is Format.JSON:
        emit_json(params_by_section(records))
        return
    if not records:
        typer.echo(f"experiment {e.id} recorded no parameters")
        return
    rows = [
        [p.section, p.key, _value(p.value), p.replica, "-" if p.rank is None else str(p.rank)]
        for p in records
    ]
    typer.echo(_table(["section", "key", "value", "replica", "rank"], rows))


@app.command("artifacts")
def artifacts(
    experiment_id: IdArg,
    download: Annotated[
        str | None, typer.Option("--download", metavar="NAME", help="Fetch this artifact.")
    ] = None,
    directory: Annotated[
        Path, typer.Option("-d", "--dir", metavar="DIR", help="Where --download writes.")
    ] = Path("."),
    output: Annotated[Format, typer.Option("-o", "--output", help="table or json")] = Format.TABLE,
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
    from phalanx.errors import NotFound, StoreError

    store = open_target(server, local)
    e = store.get_experiment(experiment_id)
    records = [a for a in store.artifacts(e.id) if kind is None or a.kind == kind]
    if download is not None:
        chosen = next((a for a in records if a.name == download), None)
        if chosen is None:
            names = ", ".join(repr(a.name) for a in records) or "none"
            raise NotFound(f"experiment {e.id} has no artifact {download!r} (artifacts: {names})")
        if is_remote(store):
            target = download_remote(store, e.id, chosen, directory)
        elif store.artifact_store is None:
            raise StoreError("this store has no artifact store to download from")
        else:
            target = store.artifact_store.download(e.id, chosen.path, directory)
        if output is Format.JSON:
            emit_json({"name": chosen.name, "path": str(target)})
        else:
            typer.echo(str(target))
        return
    if output is Format.JSON:
        emit_json([artifact_json(a) for a in records])
        return
    if not records:
        typer.echo(f"experiment {e.id} has no artifacts" + (f" of kind {kind!r}" if kind else ""))
        return
    rows = [
        [a.name, a.kind, _size(a.size), a.replica, "-" if a.rank is None else str(a.rank), a.path]
        for a in records
    ]
    typer.echo(_table(["name", "kind", "size", "replica", "rank", "path"], rows))


def download_remote(store: Any, experiment_id: str, chosen: ArtifactRecord, directory: Path) -> Path:
    """Fetch an artifact through the server's API to where a local download puts it
    (``directory``/its file name); a folder artifact (sent as a zip) is unpacked there."""
    import io
    import posixpath
    import zipfile

    data, _ = store.download(experiment_id, chosen.name)
    target = directory / posixpath.basename(chosen.path.rstrip("/"))
    directory.mkdir(parents=True, exist_ok=True)
    if chosen.kind == "folder":
        target.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            root = target.resolve()
            for member in z.infolist():
                dest = (target / member.filename).resolve()
                if not dest.is_relative_to(root) or member.is_dir():
                    continue  # nothing lands outside the folder asked for
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(z.read(member))
        return target
    tmp = target.with_name(f".{target.name}.part")
    tmp.write_bytes(data)
    tmp.replace(target)
    return target


@app.command("gc")
def gc(
    min_age: Annotated[
        float,
        typer.Option(
            "--min-age",
            metavar="SECONDS",
            help="Leave orphaned folders younger than this (a run that is just starting has one).",
        ),
    ] = 600.0,
    output: Annotated[Format, typer.Option("-o", "--output", help="table or json")] = Format.TABLE,
) -> None:
    """Remove what no experiment needs (run folders and spools of deleted or never-recorded
    experiments, ingested spools of finished ones) and compact the store (VACUUM)."""
    from phalanx.gc import collect

    store, settings = open_for_reading()
    done = collect(store, settings, min_age=min_age)
    if output is Format.JSON:
        emit_json(done.to_json())
        return
    lines = [
        f"removed {len(done.run_folders)} run folder(s), {len(done.spool_folders)} spool folder(s) and "
        f"{len(done.spool_files)} spool file(s): {_size(done.bytes_freed)} freed"
    ]
    if done.bundles or done.work_folders:  # only a server's home has uploads
        lines.append(
            f"removed {len(done.bundles)} uploaded code bundle(s) and {len(done.work_folders)} "
            "working folder(s) no experiment needs"
        )
    if done.store_bytes_before is not None and done.store_bytes_after is not None:
        lines.append(f"store compacted: {_size(done.store_bytes_before)} -> {_size(done.store_bytes_after)}")
    else:
        lines.append("store compacted (VACUUM)")
    typer.echo("\n".join(lines))
