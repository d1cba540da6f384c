"""How `phalanx params` and `phalanx artifacts` print an experiment's records, whichever door reads
them (this machine's store, its lean reader, a server), and the formatting `phalanx get` shares
with them: without typer, so that the lean `phalanx params ID` and `artifacts ID` (cli/lean.py)
import neither it nor SQLAlchemy."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any, Protocol

from phalanx.cli.listing import _table, emit_json
from phalanx.errors import UsageError
from phalanx.suggest import did_you_mean
from phalanx.terminal_text import write_shown
from phalanx.views import PER_REPLICA, conflict_notes, params_by_section

if TYPE_CHECKING:
    from phalanx.store.base import ArtifactRecord, ParamRecord

# The kinds of artifact Phalanx's SDK writes (tracking/objects.py, reports.py, checkpointing.py). The
# store keeps whatever kind a record names (another client may write its own), so a --kind is
# checked against these and the experiment's own, never refused by the store.
ARTIFACT_KINDS: tuple[str, ...] = (
    *("json", "bytes", "file", "folder", "numpy", "pandas", "image", "pickle", "text"),  # objects.py
    *("report", "checkpoint"),
)


class Params(Protocol):
    """What printing an experiment's parameters asks of a door."""

    def params(self, experiment_id: str) -> list[ParamRecord]: ...


class Artifacts(Protocol):
    """What listing an experiment's artifacts asks of a door."""

    def artifacts(self, experiment_id: str) -> list[ArtifactRecord]: ...


def print_params(door: Params, experiment_id: str, output: str) -> None:
    """The parameters of experiment ``experiment_id`` (a full id) by section, as a table (a declared
    value the script reported differently marked in its last column) or one JSON document."""
    records = door.params(experiment_id)
    if output == "json":
        emit_json(params_by_section(records))
        return
    if not records:
        print(f"experiment {experiment_id} recorded no parameters")
        return
    notes = conflict_notes(records)
    rows = [
        [p.section, p.key, shown_value(p.value), p.replica, "-" if p.rank is None else str(p.rank)]
        + ([f"≠ {notes[(p.section, p.key)]}" if (p.section, p.key) in notes else ""] if notes else [])
        for p in records
    ]
    headers = ["section", "key", "value", "replica", "rank"] + (["conflict"] if notes else [])
    echo_table(headers, rows)


def artifacts_of_kind(door: Artifacts, experiment_id: str, kind: str | None) -> list[ArtifactRecord]:
    """The artifacts of experiment ``experiment_id``, of ``kind`` only when given (a kind neither
    Phalanx's SDK writes nor the experiment has: UsageError, see ``check_kind``)."""
    every = door.artifacts(experiment_id)
    records = [a for a in every if kind is None or a.kind == kind]
    if kind is not None and not records:
        check_kind(kind, experiment_id, sorted({a.kind for a in every}))
    return records


def print_artifacts(records: list[ArtifactRecord], experiment_id: str, kind: str | None, output: str) -> None:
    """``records`` (an experiment's artifacts, of ``kind`` when given) as a table or JSON."""
    if output == "json":
        emit_json([artifact_json(a) for a in records])
        return
    if not records:
        print(f"experiment {experiment_id} has no artifacts" + (f" of kind {kind!r}" if kind else ""))
        return
    rows = [
        [a.name, a.kind, human_size(a.size), a.replica, "-" if a.rank is None else str(a.rank), a.path]
        for a in records
    ]
    echo_table(["name", "kind", "size", "replica", "rank", "path"], rows)


def check_kind(kind: str, experiment_id: str, has: list[str]) -> None:
    """A --kind that neither Phalanx's SDK writes nor this experiment has is a mistake (exit 2),
    named with the nearest kind; kinds are open (another client may write its own), so the
    experiment's own are named too. A known kind it has none of is an empty answer, not an error."""
    if kind in ARTIFACT_KINDS:
        return
    raise UsageError(
        f"--kind {kind!r}: no artifact is of that kind{did_you_mean(kind, [*has, *ARTIFACT_KINDS])}"
        f" (experiment {experiment_id} has {', '.join(has) or 'none'};"
        f" Phalanx's SDK writes {', '.join(ARTIFACT_KINDS)})"
    )


def echo_table(headers: list[str], rows: list[list[str]]) -> None:
    """A table of what a job reported (titles, values, names): on a terminal, escape sequences in it
    are shown, not acted on (phalanx.terminal_text)."""
    write_shown(_table(headers, rows), sys.stdout)


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


def human_size(n: int) -> str:
    """A byte count as every command shows it: "512 B", "1.5 KiB", ... up to GiB."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def shown_value(v: Any) -> str:
    """A parameter's value as the tables show it: a string as it is, anything else as JSON; values
    that differ between ranks each with its writer."""
    if isinstance(v, dict) and list(v) == [PER_REPLICA]:  # ranks differ: each value with its writer
        shown = (f"{shown_value(r['value'])} ({_writer(r['replica'], r['rank'])})" for r in v[PER_REPLICA])
        return ", ".join(shown)
    return v if isinstance(v, str) else json.dumps(v)


def _writer(replica: str, rank: int | None) -> str:
    return replica if rank is None else f"{replica} rank {rank}"
