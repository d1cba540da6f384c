"""`phalanx plot`: an experiment's scalars as an image, for people who want a picture without a browser."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from phalanx.cli.app import app, fail
from phalanx.cli.target import LocalOpt, ServerOpt

if TYPE_CHECKING:
    from collections.abc import Mapping

    from phalanx.domain import Series

SUFFIXES = (".png", ".svg", ".pdf", ".jpg", ".jpeg")


@app.command("plot")
def plot(
    experiment_id: Annotated[str, typer.Argument(metavar="ID", help="experiment id or a unique prefix")],
    output: Annotated[
        Path, typer.Option("-o", "--output", metavar="FILE", help="image file: .png, .svg, .pdf or .jpg")
    ],
    title: Annotated[
        list[str] | None,
        typer.Option("--title", "-t", metavar="TITLE", help="only this title (repeatable); default all"),
    ] = None,
    x: Annotated[
        str, typer.Option(metavar="step|time", help="x axis: step or time (seconds since the first point)")
    ] = "step",
    log_y: Annotated[bool, typer.Option("--log-y", help="logarithmic y axis")] = False,
    server: ServerOpt = None,
    local: LocalOpt = False,
) -> None:
    """Draw an experiment's scalars to an image file (after `phalanx login`: a server's experiment).

    One chart per title, one line per series (e.g. `loss` with a line per worker).
    """
    if output.suffix.lower() not in SUFFIXES:
        raise fail(f"cannot write {output}: give a file name ending in {', '.join(SUFFIXES)}")
    folder = output.parent
    if not folder.is_dir():  # a mistyped folder is refused, never created (nothing is written)
        what = f"{folder} is a file, not a folder" if folder.exists() else f"no folder {folder}"
        raise fail(f"-o {output}: {what}; create it first, or give another")
    if x not in ("step", "time"):
        raise fail(f"--x must be 'step' or 'time', not {x!r}")
    from phalanx.cli.reading import open_target
    from phalanx.extras import require

    require("matplotlib", "plot", "phalanx plot")  # before any work: say what to install
    store = open_target(server, local)
    experiment = store.get_experiment(experiment_id)
    wanted = list(title or [])
    available = store.metric_titles(experiment.id)
    missing = [t for t in wanted if t not in available]
    if missing:
        known = ", ".join(sorted(available)) or "none"
        raise fail(f"experiment {experiment.id} has no scalar titled {missing[0]!r} (titles: {known})")
    if not available:
        raise fail(f"experiment {experiment.id} has no scalars to plot yet")
    metrics = {t: store.metrics(experiment.id, title=t)[t] for t in (wanted or sorted(available))}
    render_scalars(metrics, output, heading=f"{experiment.name} ({experiment.id})", x=x, log_y=log_y)
    typer.echo(str(output))


MAX_POINTS = 4000  # per series: more cannot be told apart in an image this size


def render_scalars(
    metrics: Mapping[str, Mapping[str, Series]],
    output: Path,
    *,
    heading: str = "",
    x: str = "step",
    log_y: bool = False,
) -> None:
    """One subplot per title (in the given order), one line per series, written to ``output``."""
    from phalanx.downsample import downsample_indices
    from phalanx.extras import require

    require("matplotlib", "plot", "drawing scalars").use("Agg")
    import matplotlib.pyplot as plt

    n = len(metrics)
    cols = 1 if n == 1 else 2
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(7 * cols, 4 * rows), squeeze=False)
    for ax, (title, series) in zip(axes.flat, metrics.items(), strict=False):
        for name, s in sorted(series.items()):
            idx = downsample_indices(s.values, MAX_POINTS)
            if x == "time" and len(s.times) == len(s.values) and s.times:
                t0 = min(s.times)
                xs = [s.times[i] - t0 for i in idx]
            else:
                xs = [float(s.steps[i]) for i in idx]
            ys = [s.values[i] if math.isfinite(s.values[i]) else float("nan") for i in idx]
            ax.plot(xs, ys, label=name, linewidth=1.2)
        ax.set_title(title)
        ax.set_xlabel("wall time (s)" if x == "time" else "iteration")
        if log_y:
            ax.set_yscale("log")
        ax.grid(True, alpha=0.3)
        if series:
            ax.legend(fontsize="small")
    for ax in list(axes.flat)[n:]:
        ax.set_visible(False)
    if heading:
        fig.suptitle(heading)
    fig.tight_layout()
    fig.savefig(output, dpi=110)
    plt.close(fig)
