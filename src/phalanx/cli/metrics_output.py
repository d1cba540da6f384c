"""How `phalanx metrics` prints an experiment's scalars, whichever door reads them (this machine's
store, its lean reader, a server): without typer, so that the lean `phalanx metrics ID`
(cli/lean.py) imports neither it nor SQLAlchemy."""

from __future__ import annotations

import csv
import math
import sys
from typing import TYPE_CHECKING, Protocol

from phalanx.cli.listing import _table, emit_json
from phalanx.errors import NotFound
from phalanx.terminal_text import write_shown

if TYPE_CHECKING:
    from phalanx.domain import Series

FORMATS = ("table", "json", "csv")


class Scalars(Protocol):
    """What printing an experiment's scalars asks of a door."""

    def metrics(
        self, experiment_id: str, title: str | None = None, series: str | None = None
    ) -> dict[str, dict[str, Series]]: ...

    def metric_titles(self, experiment_id: str) -> dict[str, list[str]]: ...


def print_metrics(
    door: Scalars, experiment_id: str, title: str | None, series: str | None, output: str
) -> None:
    """The scalars of experiment ``experiment_id`` (a full id), of one ``title`` and/or ``series``
    when given (NotFound naming the titles it has when nothing matches), as a table (last, min and
    max per series), one JSON document or CSV rows."""
    data = door.metrics(experiment_id, title=title, series=series)
    if (title is not None or series is not None) and not data:
        titles = door.metric_titles(experiment_id)
        if series is not None and (title is None or title in titles):
            # the series it has (of that title): a misspelt series is looked for among those
            names = sorted({s for t, by in titles.items() if title in (None, t) for s in by})
            known = "series: " + (", ".join(names) or "none")
        else:
            known = "titles: " + (", ".join(titles) or "none")
        which = (
            f"series {series!r}"
            if title is None
            else repr(title)
            if series is None
            else f"{title!r}/{series!r}"
        )
        raise NotFound(f"experiment {experiment_id} has no metric {which} ({known})")
    if output == "json":
        emit_json(
            {
                t: {s: {"steps": v.steps, "values": finite_or_none(v.values)} for s, v in by.items()}
                for t, by in data.items()
            }
        )
    elif output == "csv":
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
            [t, s, str(len(v.steps)), str(v.steps[-1]), f"{v.values[-1]:.6g}",
             *(f"{x:.6g}" for x in least_and_most(v.values))]
            for t, by in data.items()
            for s, v in by.items()
        ]  # fmt: skip
        if not rows:
            sys.stdout.write(f"experiment {experiment_id} reported no metrics yet\n")
            return
        # titles and series names are the script's: a terminal shows their escape sequences
        table = _table(["title", "series", "points", "last step", "last", "min", "max"], rows)
        write_shown(table, sys.stdout)
        sys.stdout.flush()


def finite_or_none(values: list[float]) -> list[float | None]:
    """Strict JSON has no NaN/Infinity (jq, JavaScript reject them): -o json writes null instead."""
    if all(map(math.isfinite, values)):
        return values  # type: ignore[return-value]
    return [v if math.isfinite(v) else None for v in values]


def least_and_most(values: list[float]) -> tuple[float, float]:
    """The lowest and highest of a series' values, NaN left out as the run table's metric:min and
    metric:max leave it (Python's min and max answered NaN when a NaN came first, and skipped it
    elsewhere); NaN only when every value is."""
    numbers = [v for v in values if not math.isnan(v)]
    return (min(numbers), max(numbers)) if numbers else (math.nan, math.nan)
