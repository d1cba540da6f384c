"""`phalanx queue`: what runs on this machine, what waits for its cores, GPUs or memory, in order."""

from __future__ import annotations

import contextlib
import time
from typing import Any

import typer

from phalanx.cli.app import OutputOpt, app
from phalanx.cli.listing import emit_json
from phalanx.cli.target import LocalOpt, ServerOpt
from phalanx.cli.tracking import Format


def _needs(row: dict[str, Any]) -> str:
    from phalanx.machine.ledger import Need

    return Need.from_json(row["needs"]).describe()


def _holds(row: dict[str, Any]) -> str:
    parts = []
    if row["cpus"]:
        parts.append("cores " + ",".join(str(c) for c in row["cpus"]))
    if row["gpus"]:
        parts.append("GPUs " + ",".join(row["gpus"]))
    if row["needs"]["memory_mib"]:
        parts.append(f"{row['needs']['memory_mib']:g} MiB")
    return "; ".join(parts) or "-"


def _age(since: float) -> str:
    seconds = max(0.0, time.time() - since)
    if seconds < 60:
        return f"{seconds:.0f}s"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


@app.command("queue")
def queue(
    output: OutputOpt = Format.TABLE,
    server: ServerOpt = None,
    local: LocalOpt = False,
) -> None:
    """Show the queue of this machine (or of the server, after `phalanx login` or with --server):
    running experiments and what they hold, then waiting ones in the order they will start (priority
    and fair share), what each needs and why it waits (its project's quota, resources, runs ahead),
    then what waits on cluster targets."""
    from phalanx.cli.tracking import _table  # why: start-up time of `phalanx queue` (as below)
    from phalanx.domain import plural
    from phalanx.logins import choose  # why: the server's client only when one is in play

    client = choose(server, local)
    doc = _this_machine() if client is None else client.get("/queue")
    if output is Format.JSON:
        emit_json(doc)
        return
    m, free = doc["machine"], doc["free"]
    gpus = f", {free['gpus']} of {plural(m['gpus'], 'GPU')}" if m["gpus"] else ""
    where = "this machine" if client is None else f"server {client.url}"
    typer.echo(
        f"{where}: {free['cpus']} of {plural(m['cpus'], 'core')} free{gpus}, "
        f"{free['memory_mib']} of {m['memory_mib']} MiB"
    )
    rows = table_rows(doc)
    if not rows:
        typer.echo("nothing holds resources and nothing waits")
        return
    typer.echo(_table(HEADERS, rows))


HEADERS = ["#", "id", "name", "project", "state", "priority", "holds / needs", "pid", "for", "why"]


def table_rows(doc: dict[str, Any]) -> list[list[str]]:
    """The table's rows from `phalanx queue -o json`'s doc, the same from either door: what runs,
    what waits here in order, what waits on cluster targets; a masked run (another project's, on a
    server) shows ``-`` for what the server does not tell."""

    def who(r: dict[str, Any]) -> list[str]:
        return [r["experiment_id"] or "-", r["name"], r["project"] or "-"]

    running = [
        ["-", *who(r), "running", str(r["priority"]), _holds(r), _or_dash(r["pid"]), _age(r["since"]), ""]
        for r in doc["running"]
    ]
    queued = [
        [
            str(r["position"]),
            *who(r),
            "queued",
            str(r["priority"]),
            "needs " + _needs(r),
            _or_dash(r["pid"]),
            _age(r["since"]),
            r["why"],
        ]
        for r in doc["queued"]
    ]
    elsewhere = [
        ["-", *who(r), r["state"], "-", f"on {r['target']}", "-", _age(r["since"]), r["why"]]
        for r in doc.get("elsewhere", [])
    ]
    return running + queued + elsewhere


def _or_dash(value: object) -> str:
    return "-" if value is None else str(value)


def _this_machine() -> dict[str, Any]:
    """This machine's queue in the shape ``GET /api/v1/queue`` answers (``with_targets``; every row
    unmasked and yours to change), from the lean reader unless quotas need the store."""
    # why (these and the two below): `phalanx --help` and the server door never load the ledger
    from phalanx.config import Settings
    from phalanx.queue import overview, with_targets
    from phalanx.readpass import open_lean

    settings = Settings()
    if not ((settings.home / "phalanx.db").exists() or settings.db_url):
        return _unmasked(with_targets(overview(settings), None))
    reader = open_lean(settings)  # nothing due (no abandoned queued run, no quota): no SQLAlchemy
    if reader is not None and not reader.has_rows("project_quotas"):
        with reader:
            return _unmasked(with_targets(overview(settings), reader))
    if reader is not None:
        reader.close()
    from phalanx.reconcile import reconcile  # why: SQLAlchemy only when quotas need the store
    from phalanx.store import open_store  # why: as above

    store = open_store(settings)
    with contextlib.suppress(Exception):  # reading the queue must work even if the store fails
        reconcile(store, settings)  # a killed waiter's row shows stopped, not queued
    return _unmasked(with_targets(overview(settings, store), store))


def _unmasked(doc: dict[str, Any]) -> dict[str, Any]:
    for row in doc["running"] + doc["queued"] + doc["elsewhere"]:
        row.update(masked=False, may_change=True)
    return doc
