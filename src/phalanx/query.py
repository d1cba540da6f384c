"""``phalanx.search_experiments``: many experiments into one pandas DataFrame, filtered by the run
table's conditions (MLflow's ``search_runs``, W&B's ``Api().runs``).

It reads the store the CLI reads (after ingesting what is pending) with the run table's own
pieces: ``store.experiment_columns`` for ``param:KEY`` / ``metric:AGG:TITLE`` values (the summary,
never the points) and ``store.selecting.matching``, the flow behind the run table's ``where=``, so
a filter keeps the same rows in the UI, the REST API, `phalanx ls` and here. The grammar is the run table's
(``store.filters``: conditions joined by ``and``/``or`` with parentheses, or given as a list, all
of which hold). pandas is the ``query`` extra.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from phalanx.domain import ExperimentFilter, ExperimentStatus
from phalanx.errors import UsageError
from phalanx.logins import choose
from phalanx.readpass import open_for_reading
from phalanx.remote_store import RemoteStore
from phalanx.store.columns import parse_column
from phalanx.store.filters import parse_filters
from phalanx.store.selecting import MAX_SCAN, matching

if TYPE_CHECKING:
    import pandas as pd

    from phalanx.store.base import Store

BASE_COLUMNS = (
    "id",
    "name",
    "project",
    "status",
    "group_id",
    "tags",
    "created_at",
    "started_at",
    "finished_at",
)


def search_experiments(
    where: str | Sequence[str] | None = None,
    columns: Sequence[str] = (),
    project: str | None = None,
    group: str | None = None,
    status: str | None = None,
    *,
    server: str | None = None,
    local: bool = False,
    store: Store | None = None,
) -> pd.DataFrame:
    """One row per experiment matching every condition, newest first: ``id, name, project, status,
    group_id, tags, created_at, started_at, finished_at`` and one column per name in ``columns``
    (``param:lr``, ``metric:max:val/acc``; missing values are NaN/None)::

        phalanx.search_experiments("metric:max:val/acc >= 0.9 and param:lr < 0.05",
                                   columns=["param:lr", "metric:max:val/acc"], project="examples")

    Where: ``server="URL"``, or the server ``phalanx login`` chose, filters on that server (its run
    table, ``GET /api/v1/experiments?where=&column=``); ``local=True``, or no login, reads this
    machine's store. ``metric:AGG:TITLE@rankN`` is rank N's series only.

    A malformed condition or column raises UsageError saying how to write it."""
    try:
        import pandas as pd  # why: pandas is the optional `query` extra
    except ImportError:
        raise UsageError("phalanx.search_experiments needs pandas: pip install 'phalanx[query]'") from None

    # the run table's own grammar (phalanx.store.filters): mistakes are told before any store opens
    where_texts = [where] if isinstance(where, str) else list(where or [])
    flt = parse_filters(where_texts)
    for column in columns:
        parse_column(column)
    try:
        wanted_status = None if status is None else ExperimentStatus(status)
    except ValueError:
        choices = ", ".join(s.value for s in ExperimentStatus)
        raise UsageError(f"search_experiments: status {status!r} is not one of {choices}") from None
    base = ExperimentFilter(status=wanted_status, project=project, group_id=group)
    if store is None:
        client = choose(server, local, say=False, local_option="`local=True`")
        if client is not None:  # the server filters: only the matches cross the network
            remote = RemoteStore(client)
            page, values = remote.table(replace(base, offset=0, limit=MAX_SCAN), where_texts, list(columns))
            return _frame(pd, page.items, values, columns)

        store, _ = open_for_reading()
    kept, values = matching(store, base, flt, columns)
    return _frame(pd, kept, values, columns)


def _frame(
    pd: Any,
    experiments: Sequence[Any],
    values: dict[str, dict[str, Any]],
    columns: Sequence[str],
) -> pd.DataFrame:
    """A row per experiment, with the base and extra columns."""
    rows: list[dict[str, Any]] = []
    for e in experiments:
        own = values.get(e.id, {})
        row: dict[str, Any] = {
            "id": e.id,
            "name": e.name,
            "project": e.project,
            "status": str(e.status),
            "group_id": e.group_id,
            "tags": list(e.tags),
            "created_at": e.created_at,
            "started_at": e.started_at,
            "finished_at": e.finished_at,
        }
        row.update({c: own.get(c) for c in columns})
        rows.append(row)
    return pd.DataFrame(rows, columns=[*BASE_COLUMNS, *dict.fromkeys(columns)])


FRAME_COLUMNS = ("experiment_id", "title", "series", "step", "value", "time")


def metrics_frame(
    ids: Sequence[str],
    names: Sequence[str] | None = None,
    *,
    max_points: int | None = None,
    store: Store | None = None,
) -> pd.DataFrame:
    """Many experiments' scalar series as one long frame, a row per point: ``experiment_id, title,
    series, step, value, time`` (ids as given or unique prefixes; ``names``: chart titles, default
    every title each reported). ``max_points``: read each series from the multi-resolution summary
    (at most about that many points, as a chart does) instead of every point::

        ids = phalanx.search_experiments("param:lr < 0.05")["id"]
        df = phalanx.metrics_frame(ids, ["loss"], max_points=500)
        df.pivot_table(index="step", columns="experiment_id", values="value")

    Raises NotFound for an unknown id, UsageError without pandas."""
    try:
        import pandas as pd  # why: pandas is the optional `query` extra
    except ImportError:
        raise UsageError("phalanx.metrics_frame needs pandas: pip install 'phalanx[query]'") from None
    if store is None:
        store, _ = open_for_reading()
    columns: dict[str, list[Any]] = {name: [] for name in FRAME_COLUMNS}
    for given in ids:
        experiment_id = store.get_experiment(str(given)).id
        titles = list(names) if names is not None else sorted(store.metric_titles(experiment_id))
        for title in titles:
            if max_points is None:
                by_series = store.metrics(experiment_id, title).get(title, {})
            else:
                views = store.metric_view(experiment_id, title, max_points=max_points)
                by_series = {name: view.series for name, view in views.items()}
            for series_name, points in sorted(by_series.items()):
                n = len(points.steps)
                columns["experiment_id"] += [experiment_id] * n
                columns["title"] += [title] * n
                columns["series"] += [series_name] * n
                columns["step"] += list(points.steps)
                columns["value"] += list(points.values)
                times = list(points.times)
                columns["time"] += times if len(times) == n else [None] * n
    return pd.DataFrame(columns, columns=list(FRAME_COLUMNS))
