"""Sweep analysis of any set of runs: a filtered run table or a hand-picked selection, as a group's
page shows its trials. One answer holds each run's varying params and its metric (a run table
column, ``metric:AGG:TITLE``), its times for the best-so-far chart, and the params' importance
(``server.importance``: computed in a worker and cached, so it may come a request later).
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from phalanx.domain import ExperimentFilter
from phalanx.errors import NotFound, UsageError
from phalanx.server import importance
from phalanx.server.table import table_page
from phalanx.store.base import Store
from phalanx.store.columns import parse_column
from phalanx.store.paramshape import shown

MAX_RUNS = 2000  # runs analysed at once (the filtered list's first ones in its order)
MAX_PARAMS = 24  # axes of the parallel coordinates


Run = Any  # phalanx.domain.Experiment or server.schemas.ExperimentOut


def sweep_of(
    store: Store,
    base: ExperimentFilter,
    where: list[str],
    order: str | None,
    ids: list[str],
    metric: str,
    params: list[str],
) -> dict[str, Any]:
    kind, _, _ = parse_column(metric)
    if kind != "metric":
        raise UsageError(f"metric={metric!r}: use metric:AGG:TITLE (AGG last, min or max): metric:min:loss")
    missing: list[str] = []
    runs: list[Run]
    if ids:
        runs = _picked(store, base, ids, missing)
        total = len(runs)
    else:
        page = table_page(store, replace(base, offset=0, limit=MAX_RUNS), [], where, order)
        total = page.total
        runs = list(page.items)
    run_ids = [e.id for e in runs]
    keys = params or store.column_names(base.projects)["params"]
    values = store.experiment_columns(run_ids, [metric, *(f"param:{k}" for k in keys)])
    names = _varying(keys, values, run_ids)[:MAX_PARAMS]
    rows = []
    for e in runs:  # an Experiment (picked) or the table's row (filtered): the same fields
        got = values.get(e.id, {})
        rows.append(
            {
                "id": e.id,
                "name": e.name,
                "status": str(e.status),
                "group_id": e.group_id,
                "created_at": e.created_at,
                "finished_at": e.finished_at,
                "value": _number(got.get(metric)),
                "params": {n: shown(got[f"param:{n}"]) for n in names if f"param:{n}" in got},
            }
        )
    scored = [(r["params"], r["value"]) for r in rows if r["value"] is not None]
    key, found = importance.importance(metric, names, scored)
    return {
        "metric": metric,
        "total": total,
        "runs": rows,
        "params": names,
        "missing": missing,
        "importance": {"key": key, "method": importance.METHOD, "ready": found is not None, "values": found},
    }


def _picked(store: Store, base: ExperimentFilter, ids: list[str], missing: list[str]) -> list[Run]:
    """The runs named, each once, in the order given; those not found or not visible are named."""
    out: list[Run] = []
    for i in dict.fromkeys(ids):
        try:
            e = store.get_experiment(i)
        except NotFound:
            missing.append(i)
            continue
        if base.projects is not None and e.project not in base.projects:
            missing.append(i)
            continue
        if e.id not in {x.id for x in out}:
            out.append(e)
        if len(out) >= MAX_RUNS:
            break
    return out


def _varying(keys: list[str], values: dict[str, dict[str, Any]], ids: list[str]) -> list[str]:
    """The params whose value differs between the runs (the ones worth an axis), in key order."""
    out = []
    for k in keys:
        seen = {json.dumps(values.get(i, {}).get(f"param:{k}"), sort_keys=True, default=str) for i in ids}
        if len(seen) > 1:
            out.append(k)
    return out


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return float(v)
