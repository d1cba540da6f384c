"""The run table's column names, as ``Store.experiment_columns`` takes them: ``param:KEY`` (or
``param:SECTION/KEY``) and ``metric:AGG:TITLE`` with AGG one of last, min, max. Pure Python: the
SQL store reads the columns, the server checks the names a user typed before asking it.
"""

from __future__ import annotations

from phalanx.errors import UsageError

AGGREGATES = ("last", "min", "max")


def parse_column(column: str) -> tuple[str, str, str]:
    """("param", key, "") or ("metric", title, agg); UsageError naming the accepted forms."""
    kind, _, rest = column.partition(":")
    if kind == "param" and rest:
        return "param", rest, ""
    if kind == "metric":
        agg, _, title = rest.partition(":")
        if agg in AGGREGATES and title:
            return "metric", title, agg
    raise UsageError(
        f"unknown column {column!r}: use param:KEY (or param:SECTION/KEY) or metric:AGG:TITLE with AGG "
        "one of last, min, max"
    )
