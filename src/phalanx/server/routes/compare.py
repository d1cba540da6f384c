"""Compare many runs in few requests: ``GET /compare?ids=`` (each run, its params and its titles, in
one answer) and ``GET /metrics/{title}?ids=`` (one title's points of every run). Compare of 100
runs asked the server for 100 experiments, 100 params, 100 title lists and a request per run and
title (thousands of requests); now it is two, and one per title drawn.

Each id is one the caller may read (a viewer of its project): an id that is unknown, or of a
project the caller is not in, is only named in ``missing``, as if it did not exist.
"""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request, Response

from phalanx.domain import Experiment, ExperimentFilter
from phalanx.errors import PhalanxError, UsageError
from phalanx.server.chartdata import compress, encode_series
from phalanx.server.deps import StoreDep
from phalanx.server.policy import policy, principal_of
from phalanx.server.routes.metrics import MAX_VIEW_POINTS, chart_pool
from phalanx.server.schemas import ExperimentOut, ParamOut, experiment_out, finite_or_none
from phalanx.store.base import Store
from phalanx.views import conflict_notes

router = APIRouter(tags=["compare"])

MAX_IDS = 500
IdsQuery = Annotated[str, Query(max_length=MAX_IDS * 40, description="comma-separated experiment ids")]


@router.get("/compare")
@policy("signed-in")
def compare(ids: IdsQuery, store: StoreDep, request: Request) -> dict[str, Any]:
    """``{"experiments": [as GET /experiments/ID's list items], "missing": [ids left out],
    "params": {id: [as GET /experiments/ID/params]}, "titles": {id: {title: [series]}}}``."""
    runs, missing = readable(store, request, ids)
    full = [e.id for e in runs]
    params: dict[str, list[dict[str, Any]]] = {}
    for exp, records in store.params_of(full).items():
        notes = conflict_notes(records)
        params[exp] = [ParamOut.of(p, notes.get((p.section, p.key))).model_dump() for p in records]
    return {
        "experiments": [ExperimentOut(**experiment_out(e)).model_dump() for e in runs],
        "missing": missing,
        "params": params,
        "titles": store.metric_titles_of(full),
    }


@router.get("/metrics/{title:path}")
@policy("signed-in")
async def metrics_of_runs(
    request: Request,
    title: str,
    ids: IdsQuery,
    store: StoreDep,
    max_points: Annotated[int, Query(ge=4, le=MAX_VIEW_POINTS, description="per series")] = 2000,
    x: Annotated[Literal["step", "time"], Query(description="the axis buckets are taken along")] = "step",
    x_min: Annotated[float | None, Query(description="only points with x >= this (a zoomed view)")] = None,
    x_max: Annotated[float | None, Query(description="only points with x <= this")] = None,
) -> Response:
    """One title of every run in ``ids`` that has it, each series downsampled from the stored
    summary as ``GET /experiments/ID/metrics/TITLE?max_points=&format=compact`` answers it:
    ``{"title", "x", "format": "compact", "runs": {id: {series: {name: compact series}}}}``
    (runs without the title are left out), gzip-compressed when accepted. Read in the chart pool."""
    runs, _ = readable(store, request, ids)
    accept = request.headers.get("accept-encoding", "")
    loop = asyncio.get_running_loop()
    body, headers = await loop.run_in_executor(
        chart_pool(request.app), _points, store, runs, title, max_points, x, x_min, x_max, accept
    )
    return Response(body, media_type="application/json", headers=headers)


def _points(
    store: Store,
    runs: list[Experiment],
    title: str,
    max_points: int,
    x: Literal["step", "time"],
    x_min: float | None,
    x_max: float | None,
    accept: str,
) -> tuple[bytes, dict[str, str]]:
    if x_min is not None and x_max is not None and x_min > x_max:
        raise UsageError(f"x_min ({x_min}) is larger than x_max ({x_max}): nothing could be in that range")
    out: dict[str, Any] = {}
    views = store.metric_views(
        [e.id for e in runs], title, x=x, x_min=x_min, x_max=x_max, max_points=max_points
    )
    for exp, view in views.items():
        if view:
            out[exp] = {
                "series": {
                    name: encode_series(
                        v.series.steps,
                        [finite_or_none(val) for val in v.series.values],
                        v.series.times,
                        v.count,
                        v.downsampled,
                    )
                    for name, v in view.items()
                }
            }
    body = {"title": title, "x": x, "format": "compact", "runs": out}
    return compress(json.dumps(body, separators=(",", ":"), allow_nan=False).encode(), accept)


def readable(store: Store, request: Request, ids: str) -> tuple[list[Experiment], list[str]]:
    """The runs of ``ids`` the caller may read, in the order given (each once), and the ids left
    out (unknown, ambiguous, or of a project the caller is not in)."""
    wanted = list(dict.fromkeys(i.strip() for i in ids.split(",") if i.strip()))
    if len(wanted) > MAX_IDS:
        raise UsageError(f"at most {MAX_IDS} ids at once, not {len(wanted)}")
    who = principal_of(request)
    visible = who.visible_projects()
    # full ids in one read; a prefix (or an id not there) is looked up on its own
    found = store.list_experiments(ExperimentFilter(ids=tuple(wanted), projects=visible, limit=len(wanted)))
    known = {e.id: e for e in found.items}
    runs: list[Experiment] = []
    missing: list[str] = []
    for given in wanted:
        try:
            e = known.get(given) or store.get_experiment(given)
        except PhalanxError:
            missing.append(given)
            continue
        if visible is not None and e.project not in visible:
            missing.append(given)  # as if it did not exist (docs/teams.md)
        elif e.id not in {r.id for r in runs}:
            runs.append(e)
    return runs, missing
