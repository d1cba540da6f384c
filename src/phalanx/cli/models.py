"""`phalanx models ID`: the models an experiment saved (task.save_model), and `--download NAME`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from phalanx.cli.app import app, emit_json, fail

if TYPE_CHECKING:
    from phalanx.store.base import ModelRecord


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def _check(record: ModelRecord) -> str:
    """What the ONNX check said: passed/FAILED with the max abs diff; '-' for weights."""
    check = record.metadata.get("check")
    if not isinstance(check, dict):
        return "-"
    verdict = "passed" if check.get("passed") else "FAILED"
    return f"{verdict} (max diff {float(check.get('max_abs_diff', 0.0)):.2g})"


def model_json(record: ModelRecord) -> dict[str, Any]:
    return {
        "name": record.name,
        "model": record.metadata.get("model", record.name),
        "format": record.format,
        "path": record.path,
        "size": record.size,
        "replica": record.replica,
        "time": record.time,
        "metadata": dict(record.metadata),
    }


@app.command("models")
def models(
    experiment_id: Annotated[str, typer.Argument(metavar="ID", help="experiment id or a unique prefix")],
    output: Annotated[
        str, typer.Option("-o", "--output", metavar="table|json", help="table or json")
    ] = "table",
    download: Annotated[
        str | None,
        typer.Option(
            "--download",
            metavar="NAME",
            help="fetch a model: a file name (digits.onnx) or a model name (digits: all its files)",
        ),
    ] = None,
    directory: Annotated[
        Path, typer.Option("-d", "--dir", metavar="DIR", help="where --download writes")
    ] = Path("."),
) -> None:
    """List the models an experiment saved (name, format, size, replica, ONNX check), or download one."""
    if output not in ("table", "json"):
        raise fail(f"-o must be 'table' or 'json', not {output!r}")
    from phalanx.config import Settings
    from phalanx.store import open_store

    store = open_store(Settings())
    experiment = store.get_experiment(experiment_id)
    records = store.models(experiment.id)
    if download is not None:
        chosen = [r for r in records if r.name == download] or [
            r for r in records if r.metadata.get("model") == download
        ]
        if not chosen:
            names = ", ".join(r.name for r in records) or "none"
            raise fail(f"experiment {experiment.id} has no model {download!r} (models: {names})")
        if store.artifact_store is None:
            raise fail("this store has no artifact store to download from", 1)
        directory.mkdir(parents=True, exist_ok=True)
        written = []
        for record in chosen:
            target = directory / Path(record.path).name
            store.artifact_store.get_file(experiment.id, record.path, target)  # in parts, never whole
            written.append(target)
        if output == "json":
            emit_json([{"name": r.name, "file": str(p)} for r, p in zip(chosen, written, strict=True)])
        else:
            for p in written:
                typer.echo(str(p))
        return
    if output == "json":
        emit_json([model_json(r) for r in records])
        return
    if not records:
        typer.echo(
            f"experiment {experiment.id} has saved no models (task.save_model in the script saves one)"
        )
        return
    rows = [("NAME", "FORMAT", "SIZE", "REPLICA", "CHECK")]
    rows += [(r.name, r.format, _size(r.size), r.replica, _check(r)) for r in records]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        typer.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
