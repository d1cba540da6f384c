"""`phalanx checkpoints ID`, `phalanx resume ID`, `phalanx rerun ID`, `phalanx diff A B`."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from phalanx.cli.app import app, emit_json, fail

IdArg = Annotated[str, typer.Argument(metavar="ID", help="experiment id or a unique prefix")]
OutputOpt = Annotated[str, typer.Option("-o", "--output", metavar="table|json", help="table or json")]


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def _check_output(output: str) -> None:
    if output not in ("table", "json"):
        raise fail(f"-o must be 'table' or 'json', not {output!r}")


def _open() -> Any:
    from phalanx.config import Settings
    from phalanx.store import open_store

    return open_store(Settings())


@app.command("checkpoints")
def checkpoints(experiment_id: IdArg, output: OutputOpt = "table") -> None:
    """List an experiment's checkpoints (step, metrics, size, replica), the latest and the policy."""
    _check_output(output)
    from phalanx.checkpoints import from_artifacts, latest

    store = _open()
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
        rows.append((str(c.step), c.name, metrics, _size(c.size), c.replica, "latest" if c is last else ""))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        typer.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    if policy:
        typer.echo("retention: " + ", ".join(f"{k}={v}" for k, v in policy.items()))
