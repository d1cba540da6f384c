"""`phalanx queue`: what runs on this machine, what waits for its cores, GPUs or memory, in order."""

from __future__ import annotations

import contextlib
import time
from typing import Annotated, Any

import typer

from phalanx.cli.app import app, emit_json
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
    output: Annotated[Format, typer.Option("-o", "--output", help="table or json")] = Format.TABLE,
) -> None:
    """Show this machine's queue: running experiments and what they hold, then waiting ones in the
    order they will start (priority and fair share), what each needs and why it waits (its
    project's quota, resources, runs ahead)."""
    from phalanx.cli.tracking import _table
    from phalanx.config import Settings
    from phalanx.queue import overview

    settings = Settings()
    store = None
    if (settings.home / "phalanx.db").exists() or settings.db_url:
        from phalanx.readpass import open_lean

        reader = open_lean(settings)  # nothing due (no abandoned queued run, no quota): no SQLAlchemy
        if reader is not None and not reader.has_rows("project_quotas"):
            reader.close()
        else:
            if reader is not None:
                reader.close()
            from phalanx.store import open_store

            store = open_store(settings)
            from phalanx.reconcile import reconcile

            with contextlib.suppress(Exception):  # reading the queue must work even if the store fails
                reconcile(store, settings)  # a killed waiter's row shows stopped, not queued
    doc = overview(settings, store)
    if output is Format.JSON:
        emit_json(doc)
        return
    m, free = doc["machine"], doc["free"]
    gpus = f", {free['gpus']} of {m['gpus']} GPUs" if m["gpus"] else ""
    typer.echo(
        f"this machine: {free['cpus']} of {m['cpus']} cores free{gpus}, "
        f"{free['memory_mib']} of {m['memory_mib']} MiB"
    )
    rows = [
        [
            "-",
            r["experiment_id"],
            r["name"],
            r["project"],
            "running",
            str(r["priority"]),
            _holds(r),
            str(r["pid"]),
            _age(r["since"]),
            "",
        ]
        for r in doc["running"]
    ] + [
        [
            str(r["position"]),
            r["experiment_id"],
            r["name"],
            r["project"],
            "queued",
            str(r["priority"]),
            "needs " + _needs(r),
            str(r["pid"]),
            _age(r["since"]),
            r["why"],
        ]
        for r in doc["queued"]
    ]
    if not rows:
        typer.echo("nothing holds resources and nothing waits")
        return
    headers = ["#", "id", "name", "project", "state", "priority", "holds / needs", "pid", "for", "why"]
    typer.echo(_table(headers, rows))
