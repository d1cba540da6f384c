"""The run table: a page of experiments with extra columns, filtered and sorted on the server.

Without ``where``/``order`` on an extra column, the store pages as usual and only the page's rows
get their column values. With them, every experiment matching the plain filters gets its values
(two queries in the store), is filtered and sorted here, then paged: the order
is the same on every page.
"""

from __future__ import annotations

import csv
import io
import json
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from phalanx.domain import Experiment, ExperimentFilter, ExperimentStatus
from phalanx.errors import UsageError
from phalanx.server.schemas import ExperimentOut, ExperimentPage, experiment_out
from phalanx.store.base import Store
from phalanx.store.columns import parse_column
from phalanx.store.filters import parse_filters
from phalanx.store.selecting import MAX_SCAN, matching, readable

MAX_COLUMNS = 20


def table_page(
    store: Store, base: ExperimentFilter, columns: list[str], where: list[str], order: str | None
) -> ExperimentPage:
    flt = parse_filters(where)  # each where= is a filter of its own: all of them hold
    order_column = order.lstrip("-") if order else None
    wanted = list(dict.fromkeys([*columns, *flt.columns(), *([order_column] if order_column else [])]))
    if len(wanted) > MAX_COLUMNS:
        raise UsageError(f"at most {MAX_COLUMNS} extra columns at once")
    for c in wanted:
        if c not in COMPUTED_SORTS:
            parse_column(c)
    if base.order_by.lstrip("-") in COMPUTED_SORTS:  # sorted here, over every match, then paged
        if not order_column:
            order, order_column = base.order_by, base.order_by.lstrip("-")
        base = replace(base, order_by="-created_at")
    if flt.root is None and not order_column:
        page = store.list_experiments(base)
        values = readable(store.experiment_columns([e.id for e in page.items], columns)) if columns else {}
        items = page.items
        total = page.total
    else:
        extra = [c for c in wanted if c not in COMPUTED_SORTS]
        kept, values = matching(store, base, flt, extra)
        items = sort_rows(kept, values, order, order_column)
        total = len(items)
        items = items[base.offset : base.offset + base.limit]
    out = []
    for e in items:
        row = ExperimentOut(**experiment_out(e))
        row.columns = {c: values.get(e.id, {}).get(c) for c in columns if c in values.get(e.id, {})}
        out.append(row)
    return ExperimentPage(items=out, total=total, offset=base.offset, limit=base.limit)


def sort_rows(
    items: list[Experiment], values: dict[str, dict[str, Any]], order: str | None, column: str | None
) -> list[Experiment]:
    """``items`` by an extra or computed column (``values`` gets the computed keys); experiments
    without the value last, in either direction."""
    if not column:
        return items
    if column in COMPUTED_SORTS:
        now = time.time()
        for e in items:
            key = COMPUTED_SORTS[column](e, now)
            if key is not None:
                values.setdefault(e.id, {})[column] = key
    present = [e for e in items if column in values.get(e.id, {})]
    absent = [e for e in items if column not in values.get(e.id, {})]
    present.sort(key=lambda e: sort_key(values[e.id][column]), reverse=bool(order and order.startswith("-")))
    return present + absent


def duration(e: Experiment, now: float) -> float | None:
    return duration_of(str(e.status), e.created_at, e.started_at, e.finished_at, now)


def duration_of(
    status: str, created: float | None, started: float | None, finished: float | None, now: float
) -> float | None:
    """Seconds it ran, as the table shows them: until now while it runs, None before it starts."""
    start = started or created
    end = finished or (now if status in LIVE else None)
    return None if not start or end is None else max(0.0, end - start)


def replicas(e: Experiment, now: float) -> int:
    """Topology order: by how many replicas it has (1 master · 2 workers: 3)."""
    return sum(int(n) for n in (e.topology or {}).values())


LIVE = {str(s) for s in (ExperimentStatus.RUNNING, ExperimentStatus.STARTING, ExperimentStatus.PENDING)}
# built-in columns the database cannot order by (derived from several fields): sorted here, over
# every experiment that matches, so the order is the same on every page
COMPUTED_SORTS: dict[str, Callable[[Experiment, float], Any]] = {"duration": duration, "topology": replicas}


def sort_key(value: Any) -> tuple[int, Any]:
    """Numbers before text, both in order; experiments without the value last (either direction)."""
    if isinstance(value, bool):
        return (0, float(value))
    if isinstance(value, int | float):
        return (0, float(value))
    if value is None:
        return (2, "")
    return (1, str(value))


CSV_FIELDS = [
    "id",
    "name",
    "project",
    "status",
    "framework",
    "topology",
    "created_at",
    "started_at",
    "finished_at",
    "duration_s",
    "tags",
    "group_id",
]
CSV_PAGE = 500


def table_csv(
    store: Store, base: ExperimentFilter, columns: list[str], where: list[str], order: str | None
) -> str:
    """Every matching row (up to MAX_SCAN), in the table's order, as CSV with a header row."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(CSV_FIELDS + columns)
    now = time.time()
    offset = 0
    while offset < MAX_SCAN:
        page = table_page(store, replace(base, offset=offset, limit=CSV_PAGE), columns, where, order)
        for e in page.items:
            topology = " ".join(f"{k}={v}" for k, v in e.topology.items())
            took = duration_of(e.status, e.created_at, e.started_at, e.finished_at, now)
            writer.writerow(
                [
                    e.id,
                    e.name,
                    e.project,
                    e.status,
                    e.framework or "",
                    topology,
                    iso(e.created_at),
                    iso(e.started_at),
                    iso(e.finished_at),
                    "" if took is None else round(took, 3),
                    ";".join(e.tags),
                    e.group_id or "",
                ]
                + [cell(e.columns.get(c)) for c in columns]
            )
        offset += CSV_PAGE
        if offset >= page.total:
            break
    return out.getvalue()


def iso(epoch: float | None) -> str:
    return "" if not epoch else datetime.fromtimestamp(epoch, tz=UTC).isoformat(timespec="seconds")


def cell(value: Any) -> str:
    """A column value as CSV text: numbers in full (repr), objects as JSON, nothing as empty."""
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, dict | list):
        return json.dumps(value)
    return str(value)
