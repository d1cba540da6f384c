"""The run table: a page of experiments with extra columns, filtered and sorted on the server.

Without ``where``/``order`` on an extra column, the store pages as usual and only the page's rows
get their column values. With them, every experiment matching the plain filters gets its values
(two queries in the store), is filtered and sorted here, then paged: the order
is the same on every page.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from phalanx.errors import UsageError
from phalanx.server.schemas import ExperimentOut, ExperimentPage, experiment_out
from phalanx.store.base import ExperimentFilter, Store
from phalanx.store.columns import parse_column
from phalanx.store.filters import parse_filters
from phalanx.store.paramshape import shown

MAX_COLUMNS = 20
MAX_SCAN = 100_000  # experiments considered when sorting or filtering by an extra column


def table_page(
    store: Store, base: ExperimentFilter, columns: list[str], where: list[str], order: str | None
) -> ExperimentPage:
    conditions = parse_filters(where)  # each where= may itself be an and-joined filter
    order_column = order.lstrip("-") if order else None
    wanted = list(
        dict.fromkeys([*columns, *(c.column for c in conditions), *([order_column] if order_column else [])])
    )
    if len(wanted) > MAX_COLUMNS:
        raise UsageError(f"at most {MAX_COLUMNS} extra columns at once")
    for c in wanted:
        parse_column(c)
    if not conditions and not order_column:
        page = store.list_experiments(base)
        values = readable(store.experiment_columns([e.id for e in page.items], columns)) if columns else {}
        items = page.items
        total = page.total
    else:
        everything = store.list_experiments(replace(base, offset=0, limit=MAX_SCAN))
        values = readable(store.experiment_columns([e.id for e in everything.items], wanted))
        items = [
            e for e in everything.items if all(c.matches(values[e.id].get(c.column)) for c in conditions)
        ]
        if order_column:
            present = [e for e in items if order_column in values[e.id]]
            absent = [e for e in items if order_column not in values[e.id]]
            present.sort(
                key=lambda e: sort_key(values[e.id][order_column]),
                reverse=bool(order and order.startswith("-")),
            )
            items = present + absent  # experiments without the value last, either direction
        total = len(items)
        items = items[base.offset : base.offset + base.limit]
    out = []
    for e in items:
        row = ExperimentOut(**experiment_out(e))
        row.columns = {c: values.get(e.id, {}).get(c) for c in columns if c in values.get(e.id, {})}
        out.append(row)
    return ExperimentPage(items=out, total=total, offset=base.offset, limit=base.limit)


def readable(values: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Column values as the table shows, filters and sorts them: a param stored before the bounds
    on depth and size (``store.paramshape``) reads as a short note, so the page still answers."""
    return {exp: {c: shown(v) for c, v in cols.items()} for exp, cols in values.items()}


def sort_key(value: Any) -> tuple[int, Any]:
    """Numbers before text, both in order; experiments without the value last (either direction)."""
    if isinstance(value, bool):
        return (0, float(value))
    if isinstance(value, int | float):
        return (0, float(value))
    if value is None:
        return (2, "")
    return (1, str(value))
