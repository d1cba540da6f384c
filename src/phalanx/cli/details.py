"""What `phalanx get ID` shows: one experiment in full (status, how it was launched, replicas,
params, artifacts, metrics, attempts, source and pace), as text or `-o json`.

The command itself (its options) stays in cli/tracking.py with the other read commands; this module
renders. Only the standard library is imported at module level; the store is passed in.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Protocol

from phalanx.cli.listing import Format, _duration, _table, _when, emit_json
from phalanx.cli.record_tables import artifact_json, human_size, shown_value
from phalanx.terminal_text import write_shown
from phalanx.views import param_conflicts, params_by_section

if TYPE_CHECKING:
    from phalanx.domain import Experiment, Replica
    from phalanx.store.base import ArtifactRecord, ModelRecord, ParamRecord


class ExperimentRecords(Protocol):
    """What `phalanx get` reads: either door's store (``Door``: this machine's or a server's) or
    the lean reader (``LiteReader``: this machine's SQLite store without SQLAlchemy)."""

    server_url: str | None

    def get_experiment(self, experiment_id: str) -> Experiment: ...

    def list_replicas(self, experiment_id: str) -> list[Replica]: ...

    def params(self, experiment_id: str) -> list[ParamRecord]: ...

    def artifacts(self, experiment_id: str) -> list[ArtifactRecord]: ...

    def models(self, experiment_id: str) -> list[ModelRecord]: ...

    def metric_titles(self, experiment_id: str) -> dict[str, list[str]]: ...

    def texts(self, experiment_id: str) -> list[dict[str, Any]]: ...

    def run_details(self, experiment_id: str) -> dict[str, Any]: ...


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
            # a failed replica's reason ends with its last lines ("...; last lines of its log:" and
            # one line each): the first goes on the attempt's line, the rest under it
            first, *rest = (a.get("reason") or "").splitlines() or [""]
            why = f" ({first.rstrip(':')})" if first else ""
            out.append(f"  {a['number']}  {a['kind']}{step}: {a['status']}{why}{_code_note(a)}")
            out += [f"     {line}" for line in rest]
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


def show_experiment(store: ExperimentRecords, experiment_id: str, output: Format, file: bool) -> None:
    """`phalanx get`'s answer from ``store`` (this machine's or a server's): the experiment file alone
    with ``file``, else everything about it, as text or one JSON document."""
    e = store.get_experiment(experiment_id)
    launch = _launch(e)
    if file:
        if e.spec_text is None:
            from phalanx.errors import UsageError

            raise UsageError(
                f"experiment {e.id} was not launched from a file (a script that called Task.init itself"
                f" keeps none); `phalanx get {e.id}` shows what it ran"
            )
        sys.stdout.write(e.spec_text if e.spec_text.endswith("\n") else e.spec_text + "\n")
        return
    replicas = store.list_replicas(e.id)
    records = store.params(e.id)
    params = params_by_section(records)
    conflicts = param_conflicts(records)
    artifacts = store.artifacts(e.id)
    titles = store.metric_titles(e.id)
    models = store.models(e.id)
    if output is Format.JSON:
        doc = e.to_json()
        doc.update(
            launch=launch,
            spec_text=e.spec_text,
            replicas=[r.to_json() for r in replicas],
            params=params,
            param_conflicts=conflicts,
            artifacts=[artifact_json(a) for a in artifacts],
            metrics=titles,
            models=[{"name": m.name, "format": m.format, "path": m.path, "size": m.size} for m in models],
            notes=e.notes,
            reports=store.texts(e.id),
        )
        doc.update(store.run_details(e.id))
        from phalanx.data.lineage import inputs_of

        doc["inputs"] = inputs_of(e.plan)  # the dataset versions and datastores it read
        emit_json(doc)
        return
    out = _summary_lines(store, e, launch)
    out.extend(_replica_and_param_lines(replicas, params))
    for c in conflicts:  # declared one value, the script reported another: said, never hidden
        reported = ", ".join(f"{r['section']} {shown_value(r['value'])}" for r in c["reported"])
        declared = f"{c['declared']['section']} {shown_value(c['declared']['value'])}"
        out.append(f"  conflict: {c['key']} declared {declared}, the script reported {reported}")
    out.extend(_content_lines(store, e, artifacts, models, titles))
    # reasons quote replicas' last lines, params and notes are the script's: a terminal gets no escape
    # sequence from them but colours (phalanx.terminal_text)
    write_shown("\n".join(out), sys.stdout)


def _summary_lines(store: ExperimentRecords, e: Experiment, launch: dict[str, Any]) -> list[str]:
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
        given = " ".join(f"{k}={shown_value(v)}" for k, v in launch["params"].items())
        out.append(f"--param:   {given}")
    if launch["commands"]:
        out.append("")
        out.append("commands:")
        out.extend(f"  {name}: {command}" for name, command in launch["commands"].items())
    if str(e.status) == "queued":
        place = "waiting in the server's queue" if store.server_url else _queue_place(e.id)
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
        out.extend(f"    {k} = {shown_value(v)}" for k, v in sorted(values.items()))
    return out


def _content_lines(
    store: ExperimentRecords,
    e: Experiment,
    artifacts: list[ArtifactRecord],
    models: list[ModelRecord],
    titles: dict[str, list[str]],
) -> list[str]:
    """What it produced: artifacts, models, metrics, text reports, run details and its data inputs."""
    out = ["", "artifacts:"]
    out.extend(f"  {a.name}  ({a.kind}, {human_size(a.size)}, from {a.replica})" for a in artifacts)
    if not artifacts:
        out.append("  (none)")
    if models:
        out.append("")
        out.append("models:")
        out.extend(f"  {m.name}  ({m.format}, {human_size(m.size)})" for m in models)
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
    out.extend(run_details_text(store.run_details(e.id)))
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
