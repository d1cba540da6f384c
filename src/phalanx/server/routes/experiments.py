"""Experiments: search, detail, replicas, stop, resume and delete."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request, Response

from phalanx.domain import ExperimentFilter, ExperimentStatus
from phalanx.errors import Conflict
from phalanx.ids import check_destructive
from phalanx.runner.resuming import resume_of
from phalanx.runner.running import StartFailed
from phalanx.server.audit import describe, launched_by
from phalanx.server.boxing import check_submitter, isolation_for
from phalanx.server.control import request_stop
from phalanx.server.deps import SettingsDep, StoreDep, experiment_of
from phalanx.server.policy import policy, principal_of, typed_id
from phalanx.server.schemas import (
    AnnotateIn,
    ColumnsOut,
    ExperimentDetail,
    ExperimentOut,
    ExperimentPage,
    ReplicaOut,
    ResumedOut,
    StopOut,
    TextOut,
    experiment_out,
)
from phalanx.server.sweepset import sweep_of
from phalanx.server.table import table_csv, table_page

router = APIRouter(tags=["experiments"])

SortKey = Literal[
    "created_at",
    "-created_at",
    "started_at",
    "-started_at",
    "finished_at",
    "-finished_at",
    "name",
    "-name",
    "project",
    "-project",
    "status",
    "-status",
    "id",
    "-id",
    "framework",
    "-framework",
    "group_id",
    "-group_id",
    "duration",
    "-duration",
    "topology",
    "-topology",
]


@dataclass(frozen=True)
class TableRequest:
    """What the run table asked for: the plain filters (with the page) and the extra columns."""

    base: ExperimentFilter
    columns: list[str]
    where: list[str]
    order: str | None


def table_request(
    request: Request,
    store: StoreDep,
    column: Annotated[
        list[str] | None,
        Query(
            max_length=300,
            description="extra columns: param:KEY (or param:SECTION/KEY), "
            "metric:AGG:TITLE (AGG last/min/max)",
        ),
    ] = None,
    where: Annotated[
        list[str] | None,
        Query(
            max_length=300,
            description="COLUMN OP VALUE (OP = != < <= > >=), several joined by 'and' or repeated, "
            "e.g. param:optimizer=adam and metric:max:acc>=0.9",
        ),
    ] = None,
    order: Annotated[
        str | None,
        Query(max_length=300, description="sort by an extra column, '-' first for descending (all pages)"),
    ] = None,
    status: ExperimentStatus | None = None,
    project: Annotated[str | None, Query(max_length=200)] = None,
    tag: Annotated[str | None, Query(max_length=200)] = None,
    q: Annotated[str | None, Query(max_length=200, description="text in the id, name or project")] = None,
    group: Annotated[
        str | None, Query(max_length=64, description="only the trials of this group (id or unique prefix)")
    ] = None,
    offset: Annotated[int, Query(ge=0, le=10**9)] = 0,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    sort: Annotated[
        SortKey, Query(description="a field, '-' first for descending (every page, on the server)")
    ] = "-created_at",
) -> TableRequest:
    group_id = None
    if group:  # an unknown group is a 404, not every experiment
        group_id = store.resolve_group(group, projects=principal_of(request).visible_projects())
    base = ExperimentFilter(
        group_id=group_id,
        projects=principal_of(request).visible_projects(),
        status=status,
        project=project or None,
        tag=tag or None,
        text=q or None,
        offset=offset,
        limit=limit,
        order_by=sort,
    )
    return TableRequest(base, list(column or []), list(where or []), order)


TableDep = Annotated[TableRequest, Depends(table_request)]


@router.get("/experiments", response_model=ExperimentPage)
@policy("signed-in")
def list_experiments(store: StoreDep, table: TableDep) -> ExperimentPage:
    """Experiments matching every filter given, one page at a time. Extra ``column``s (params,
    metric aggregates) come back in each item's ``columns``; ``where`` and ``order`` on such columns
    filter and sort across every page, on the server."""
    return table_page(store, table.base, table.columns, table.where, table.order)


@router.get("/experiments.csv", response_class=Response)
@policy("signed-in")
def export_experiments(store: StoreDep, table: TableDep) -> Response:
    """The run table as CSV: every experiment matching the filters (not one page), in the same
    order, with the extra columns; numbers at full precision."""
    text = table_csv(store, table.base, table.columns, table.where, table.order)
    return Response(
        text,
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": 'attachment; filename="experiments.csv"'},
    )


@router.get("/sweep")
@policy("signed-in")
def sweep_analysis(
    store: StoreDep,
    table: TableDep,
    metric: Annotated[str, Query(max_length=300, description="metric:AGG:TITLE, e.g. metric:min:loss")],
    ids: Annotated[
        str | None, Query(max_length=100_000, description="these runs (comma-separated ids), not the filters")
    ] = None,
    param: Annotated[
        list[str] | None, Query(max_length=100, description="these params (default: every param that varies)")
    ] = None,
) -> dict[str, Any]:
    """Sweep analysis of a set of runs (the run table's filters, or ``ids``): each run's varying
    params and metric, and the params' importance (η², computed in the background and cached:
    ``importance.ready`` false means ask again shortly)."""
    picked = [i.strip() for i in (ids or "").split(",") if i.strip()]
    return sweep_of(store, table.base, table.where, table.order, picked, metric, list(param or []))


@router.get("/experiments/{experiment_id}", response_model=ExperimentDetail)
@policy("experiment:viewer")
def get_experiment(experiment_id: str, store: StoreDep, request: Request) -> ExperimentDetail:
    """One experiment (a unique id prefix is enough) with its file, plan and replicas."""
    e = experiment_of(store, experiment_id)
    return ExperimentDetail(
        **experiment_out(e),
        spec_text=e.spec_text,
        plan=dict(e.plan),
        handle=e.handle,
        replicas=[ReplicaOut.of(r) for r in store.list_replicas(e.id)],
        launched_by=launched_by(request, "experiment", e.id),
    )


@router.get("/experiments/{experiment_id}/replicas", response_model=list[ReplicaOut])
@policy("experiment:viewer")
def list_replicas(experiment_id: str, store: StoreDep) -> list[ReplicaOut]:
    e = experiment_of(store, experiment_id)
    return [ReplicaOut.of(r) for r in store.list_replicas(e.id)]


@router.patch("/experiments/{experiment_id}", response_model=ExperimentOut)
@policy("experiment:editor")
def annotate_experiment(
    experiment_id: str, body: AnnotateIn, store: StoreDep, request: Request
) -> ExperimentOut:
    """Replace the experiment's tags and/or notes (a field left out is unchanged)."""
    e = experiment_of(store, experiment_id)
    describe(request, "experiment.annotate", e.id, e.project)
    return ExperimentOut(**experiment_out(store.annotate(e.id, tags=body.tags, notes=body.notes)))


@router.get("/experiments/{experiment_id}/texts", response_model=list[TextOut])
@policy("experiment:viewer")
def list_texts(experiment_id: str, store: StoreDep) -> list[TextOut]:
    """The experiment's report_text messages, oldest first."""
    e = experiment_of(store, experiment_id)
    return [TextOut(**t) for t in store.texts(e.id)]


@router.get("/columns", response_model=ColumnsOut)
@policy("signed-in")
def list_columns(store: StoreDep, request: Request) -> ColumnsOut:
    """Param keys and scalar titles experiments reported: what the run table can show as columns
    (those of the caller's projects' experiments)."""
    names = store.column_names(principal_of(request).visible_projects())
    return ColumnsOut(params=names["params"], metrics=names["metrics"])


@router.post("/experiments/{experiment_id}/stop", response_model=StopOut)
@policy("experiment:editor")
def stop_experiment(experiment_id: str, store: StoreDep, settings: SettingsDep, request: Request) -> StopOut:
    """Ask the experiment's supervisor to stop every replica; the supervisor then marks it stopped.
    400 for a short prefix of its id (a destructive call needs 8 characters or the full id)."""
    e = experiment_of(store, experiment_id)
    check_destructive(typed_id(request, experiment_id), e.id, "stop")
    if e.status.done:
        return StopOut(id=e.id, status=str(e.status), stop_requested=False, message=f"already {e.status}")
    message = request_stop(store, settings.store, e)
    describe(request, "experiment.stop", e.id, e.project)
    current = store.get_experiment(e.id)
    return StopOut(id=e.id, status=str(current.status), stop_requested=True, message=message)


@router.post("/experiments/{experiment_id}/resume", response_model=ResumedOut)
@policy("experiment:editor")
def resume_experiment(
    experiment_id: str, store: StoreDep, settings: SettingsDep, request: Request
) -> ResumedOut:
    """Continue a failed or stopped experiment as a new attempt of itself on this server's machine
    (`phalanx resume ID` after `phalanx login`): its recorded file, params and folder, boxed as its
    project's submits are, from its latest checkpoint; metrics continue on the same series.
    Answered once its supervisor has reopened it. 409 unless it is failed or stopped (or a resume
    of it is already starting); 400 when Phalanx cannot start it again (its folder gone, no
    recorded launch)."""
    check_submitter(settings.box, principal_of(request))  # it runs code, as a submit does
    e = experiment_of(store, experiment_id)
    planned = resume_of(store, e)
    # boxed as its project's submits are now (as a clone is), not as its record says
    box = isolation_for(settings.store, e.project)
    try:
        request.app.state.launcher.resume(replace(planned, options=replace(planned.options, isolation=box)))
    except StartFailed as exc:  # e.g. a second resume of it, whose supervisor lost the race
        raise Conflict(exc.text or str(exc)) from None
    describe(request, "experiment.resume", e.id, e.project)
    return ResumedOut(id=e.id, status=str(store.get_experiment(e.id).status))


@router.delete("/experiments/{experiment_id}", status_code=204)
@policy("experiment:admin")
def delete_experiment(experiment_id: str, store: StoreDep, request: Request) -> None:
    """Delete an experiment with everything it reported; 409 while it runs (stop it first); 400 for
    a short prefix of its id (phalanx.ids: a destructive call needs 8 characters or the full id)."""
    e = experiment_of(store, experiment_id)
    check_destructive(typed_id(request, experiment_id), e.id)
    store.delete_experiment(e.id)
    describe(request, "experiment.delete", e.id, e.project)
