"""Which experiments a run-table filter keeps: the one flow behind the API's ``where=`` (the run
table, its CSV, the sweep view), ``phalanx ls --where`` and ``phalanx.search_experiments``, so a
filter keeps the same rows wherever it is typed.

Every experiment matching the plain filters (status, project, text, group; up to ``MAX_SCAN``) gets
its values of the asked columns and the filter's (two queries in the store: params rows and the
chart summary, never the points), then ``store.filters`` checks and applies the filter.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from phalanx.domain import Experiment, ExperimentFilter
from phalanx.store.base import Store
from phalanx.store.columns import parse_column
from phalanx.store.filters import Filter
from phalanx.store.paramshape import shown

MAX_SCAN = 100_000  # experiments considered when filtering or sorting by an extra column


def matching(
    store: Store, base: ExperimentFilter, flt: Filter, columns: Sequence[str] = ()
) -> tuple[list[Experiment], dict[str, dict[str, Any]]]:
    """Every experiment of ``base``'s filters (not its page) that ``flt`` keeps, in ``base``'s
    order, and id -> column -> value of ``columns`` and the filter's columns (absent: none).
    Raises UsageError for a malformed column, FilterError for a filter the values refuse."""
    for column in columns:
        parse_column(column)
    everything = store.list_experiments(replace(base, offset=0, limit=MAX_SCAN)).items
    ids = [e.id for e in everything]
    wanted = list(dict.fromkeys([*columns, *flt.columns()]))
    values = readable(store.experiment_columns(ids, wanted)) if wanted else {}
    scope = [base.project] if base.project else base.projects
    kept = set(flt.select(ids, values, lambda: store.column_names(scope)))
    return [e for e in everything if e.id in kept], values


def readable(values: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Column values as the table shows, filters and sorts them: a param stored before the bounds
    on depth and size (``store.paramshape``) reads as a short note, so the page still answers."""
    return {exp: {c: shown(v) for c, v in cols.items()} for exp, cols in values.items()}
