"""Scalars: the titles and series of an experiment, and one title's points (downsampled on request)."""

from __future__ import annotations

import asyncio
import math
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request, Response

from phalanx.domain import Experiment, Series
from phalanx.downsample import downsample_indices
from phalanx.errors import NotFound, UsageError
from phalanx.server.chartcache import ChartCache
from phalanx.server.chartdata import compress, encode_series, render
from phalanx.server.deps import StoreDep, experiment_of
from phalanx.server.policy import checked_experiment, policy
from phalanx.server.schemas import MetricOut, MetricTitles, SeriesOut, finite_or_none
from phalanx.store.base import SeriesView, Store

router = APIRouter(tags=["metrics"])

# A view this size or smaller comes from the stored summary (never reading the raw points of a
# zoomed-out view); a bigger max_points (an export) reads the points.
MAX_VIEW_POINTS = 20_000
CHART_SLOTS = 2  # chart reads running at once (the chart pool's threads)


@router.get("/experiments/{experiment_id}/metrics", response_model=MetricTitles)
@policy("experiment:viewer")
def metric_titles(experiment_id: str, store: StoreDep) -> MetricTitles:
    """Every scalar title with its series names (no points: ask for a title to get them)."""
    e = experiment_of(store, experiment_id)
    return MetricTitles(titles={t: list(s) for t, s in store.metric_titles(e.id).items()})


@router.get(
    "/experiments/{experiment_id}/metrics/{title:path}",
    response_model=MetricOut,
    responses={
        200: {
            "description": "MetricOut; with format=compact the compact form instead (delta-coded "
            "steps and times, rounded values; docs/server.md), gzip-compressed when accepted"
        }
    },
)
@policy("experiment:viewer")
async def metric(
    request: Request,
    experiment_id: str,
    title: str,
    store: StoreDep,
    max_points: Annotated[
        int | None,
        Query(ge=4, le=1_000_000, description="downsample each series to at most this many points"),
    ] = None,
    x: Annotated[Literal["step", "time"], Query(description="the axis buckets are taken along")] = "step",
    series: Annotated[str | None, Query(max_length=500, description="only this series")] = None,
    x_min: Annotated[float | None, Query(description="only points with x >= this (a zoomed view)")] = None,
    x_max: Annotated[float | None, Query(description="only points with x <= this")] = None,
    format: Annotated[
        Literal["json", "compact"],
        Query(
            description="compact: delta-coded steps and times, values to what a chart shows, gzip "
            "(the web UI's form; docs/server.md); json: full-precision floats"
        ),
    ] = "json",
) -> Response:
    """One title's series. With ``max_points``, each longer series keeps the min and max of every
    bucket (so spikes stay visible) plus its first and last point; shorter series come back exact.
    ``x_min``/``x_max`` (along ``x``) restrict it to a zoomed range first, so zooming in shows every
    point again once few enough are in view.

    Chart reads run on a pool of their own (``CHART_SLOTS`` threads; the rest wait their turn) and
    answer bytes made there: twenty browsers on a big experiment must not hold the threads and the
    event loop that the list and the other pages of the one server process answer from."""
    args = (experiment_id, title, store, max_points, x, series, x_min, x_max)
    checked = checked_experiment(request, experiment_id)
    accept = request.headers.get("accept-encoding", "")
    gzip_ok = "gzip" in accept.lower()
    cache = chart_cache(request.app)
    key = (*args[:2], *args[3:], format, gzip_ok)
    answer = cache.get(key)
    if answer is None:
        loop = asyncio.get_running_loop()
        body, headers, done = await loop.run_in_executor(
            chart_pool(request.app), _answer, args, format, accept, checked
        )
        answer = (body, headers)
        if done:
            cache.put(key, answer)
    return Response(answer[0], media_type="application/json", headers=answer[1])


def chart_cache(app: Any) -> ChartCache:
    """The app's recent chart answers of finished experiments (phalanx.server.chartcache)."""
    cache: ChartCache | None = getattr(app.state, "chart_cache", None)
    if cache is None:
        cache = app.state.chart_cache = ChartCache()
    return cache


def chart_pool(app: Any) -> ThreadPoolExecutor:
    """The app's chart-read threads, made on first use (``close_chart_pool`` ends them)."""
    pool: ThreadPoolExecutor | None = getattr(app.state, "chart_pool", None)
    if pool is None:
        pool = app.state.chart_pool = ThreadPoolExecutor(CHART_SLOTS, thread_name_prefix="phalanx-chart")
    return pool


def close_chart_pool(app: Any) -> None:
    pool: ThreadPoolExecutor | None = getattr(app.state, "chart_pool", None)
    if pool is not None:
        app.state.chart_pool = None
        pool.shutdown(wait=False, cancel_futures=True)


def _answer(
    args: tuple[Any, ...], form: str, accept_encoding: str, checked: Experiment | None = None
) -> tuple[bytes, dict[str, str], bool]:
    """The response body in the asked form, serialised here (in the chart pool, off the event loop),
    and whether the experiment had finished (its answer may be kept a while). ``checked``: the
    experiment the access policy read a moment ago (not read again)."""
    title, x = args[1], args[4]
    e = checked if checked is not None else experiment_of(args[2], args[0])
    done = bool(e.status.done)
    found = _metric(e, *args[1:])
    if form == "compact":
        encoded = {
            name: encode_series(v.series.steps, v.series.values, v.series.times, v.count, v.downsampled)
            for name, v in found.items()
        }
        return (*compress(render(title, x, encoded), accept_encoding), done)
    out = MetricOut(
        title=title,
        x=x,
        series={
            name: SeriesOut(
                steps=v.series.steps,
                values=[finite_or_none(val) for val in v.series.values],
                times=v.series.times,
                count=v.count,
                downsampled=v.downsampled,
            )
            for name, v in found.items()
        },
    )
    return out.model_dump_json().encode(), {}, done


def _metric(
    e: Experiment,
    title: str,
    store: Store,
    max_points: int | None,
    x: Literal["step", "time"],
    series: str | None,
    x_min: float | None,
    x_max: float | None,
) -> dict[str, SeriesView]:
    for name, bound in (("x_min", x_min), ("x_max", x_max)):
        if bound is not None and not math.isfinite(bound):
            raise UsageError(f"{name} must be a finite number, not {bound}")
    if x_min is not None and x_max is not None and x_min > x_max:
        raise UsageError(f"x_min ({x_min}) is larger than x_max ({x_max}): nothing could be in that range")
    if max_points is not None and max_points <= MAX_VIEW_POINTS:
        view = store.metric_view(
            e.id, title, series=series, x=x, x_min=x_min, x_max=x_max, max_points=max_points
        )
        if view:
            return view
    found = store.metrics(e.id, title=title, series=series).get(title)
    if not found:
        known = store.metric_titles(e.id).get(title) if series is not None else None
        if known:
            raise NotFound(
                f"scalar {title!r} of experiment {e.id} has no series {series!r} (it has: {', '.join(known)})"
            )
        raise NotFound(f"experiment {e.id} has no scalar titled {title!r}")
    window = (x_min, x_max)
    return {name: _series_view(s, max_points, x, window) for name, s in found.items()}


def _series_view(
    s: Series, max_points: int | None, x: str, window: tuple[float | None, float | None] = (None, None)
) -> SeriesView:
    n = len(s.values)
    times = list(s.times) if len(s.times) == n else []
    axis: list[float] | list[int] = times if x == "time" and times else s.steps
    order = list(range(n))
    if axis is times:
        # Points come in step order and wall time normally agrees; bucket in time order regardless.
        order.sort(key=lambda i: times[i])
    lo, hi = window
    if lo is not None or hi is not None:
        lo = -math.inf if lo is None else lo
        hi = math.inf if hi is None else hi
        order = [i for i in order if lo <= axis[i] <= hi]
    if max_points is not None and len(order) > max_points:
        order = [order[k] for k in downsample_indices([s.values[i] for i in order], max_points)]
    picked = Series(
        [s.steps[i] for i in order], [s.values[i] for i in order], [times[i] for i in order] if times else []
    )
    return SeriesView(picked, count=n, downsampled=len(order) < n)
