"""The run table's column names, as ``Store.experiment_columns`` takes them: ``param:KEY`` (or
``param:SECTION/KEY``) and ``metric:AGG:TITLE`` with AGG one of last, min, max, over every series
of the title, or ``metric:AGG:TITLE@rankN`` over the series rank N reported (the points' own rank,
so one rank of a DDP job is a column of its own). Pure Python: the SQL store reads the columns, the
server checks the names a user typed before asking it.
"""

from __future__ import annotations

import re

from phalanx.errors import UsageError

AGGREGATES = ("last", "min", "max")
_RANK = re.compile(r"^(?P<title>.+)@rank(?P<rank>\d{1,9})$")


def split_rank(title: str) -> tuple[str, int | None]:
    """``"loss@rank1"`` -> ("loss", 1); a title without the suffix -> (title, None)."""
    found = _RANK.match(title)
    return (found["title"], int(found["rank"])) if found else (title, None)


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
        "one of last, min, max (metric:AGG:TITLE@rankN: rank N's series only)"
    )
