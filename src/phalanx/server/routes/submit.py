"""Submitting experiments: ``POST /experiments`` (multipart: the file, params, priority, target, the
code bundle; or JSON ``{"from": ID}``: clone and enqueue), ``GET /experiments/{id}/submission``
(which bundle it ran) and ``GET /targets`` (where a submit may run)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import anyio
from fastapi import APIRouter, Header, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile as StarletteUploadFile

from phalanx.errors import NotFound
from phalanx.server.admission import cluster_of, targets
from phalanx.server.audit import mark_audited
from phalanx.server.boxing import check_submitter
from phalanx.server.deps import SettingsDep, StoreDep, experiment_of
from phalanx.server.policy import policy, principal_of, require_experiment, require_project
from phalanx.server.submitting import (
    CloneRequest,
    SubmitRequest,
    SubmitResult,
    Submitter,
    clone,
    parse_params,
    submit,
)
from phalanx.spec.loader import parse_param_overrides
from phalanx.store.accounts import Role, check_project

if TYPE_CHECKING:
    from phalanx.server.settings import ServerSettings
    from phalanx.store.base import LocalStore

router = APIRouter(tags=["experiments"])


class SubmittedOut(BaseModel):
    id: str
    bundle_sha256: str = Field(description="sha256 of the code bundle received")
    created: bool = Field(description="false when an earlier submit with the same Idempotency-Key made it")
    kind: str = Field("experiment", description="experiment, or group (a `kind: group` file: a group id)")


class SubmissionOut(BaseModel):
    id: str
    bundle_sha256: str
    submitted_at: float


class SubmitForm(BaseModel):
    """The multipart form of a submit from a folder (`phalanx run -f FILE --server URL`)."""

    file_name: str = Field(max_length=500, description="the file's path in the bundle")
    file_text: str = Field(max_length=1 << 20, description="the experiment file's text")
    params: str | None = Field(None, max_length=1 << 20, description='JSON: {"lr": 0.1}')
    extra_params: bool = Field(False, description="accept params the experiment file does not declare")
    priority: int = Field(0, ge=-(10**6), le=10**6)
    target: str = Field(
        "local",
        min_length=1,
        max_length=200,
        description="local (this machine) or a registered cluster's name",
    )


class TargetOut(BaseModel):
    name: str = Field(description="what a submit's target field names")
    kind: str = Field(description="local, slurm or kubernetes")


class CloneIn(BaseModel):
    """Clone and enqueue (`phalanx rerun ID --server URL`, the UI's "Run again with…")."""

    model_config = ConfigDict(populate_by_name=True, extra="forbid")

    origin: str = Field(alias="from", min_length=1, max_length=200, description="the experiment to run again")
    params: dict[str, Any] = Field(default_factory=dict, description="changed params, over the recorded ones")
    texts: dict[str, str] = Field(
        default_factory=dict,
        description="changed params as typed (a form's text boxes), read as `--param NAME=VALUE` reads VALUE",
    )
    priority: int = Field(0, ge=-(10**6), le=10**6)
    attempt: int | None = Field(None, ge=0, le=2**31 - 1, description="rerun what this attempt ran")
    extra_params: bool = Field(False, description="accept params the experiment file does not declare")
    latest_data: bool = Field(
        False, description="read each dataset input's latest version, not the one the origin read"
    )
    target: str | None = Field(
        None,
        min_length=1,
        max_length=200,
        description="local or a registered cluster (default: where it ran)",
    )


_FORM_SCHEMA = {
    "type": "object",
    "required": ["file_name", "file_text", "bundle"],
    "properties": {
        **SubmitForm.model_json_schema()["properties"],
        "bundle": {"type": "string", "format": "binary", "description": "the submitter's folder, a .tar.gz"},
    },
}


@router.post(
    "/experiments",
    response_model=SubmittedOut,
    status_code=201,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "multipart/form-data": {"schema": _FORM_SCHEMA},
                "application/json": {"schema": CloneIn.model_json_schema(by_alias=True)},
            },
        }
    },
)
@policy("body")
async def submit_experiment(
    request: Request,
    store: StoreDep,
    settings: SettingsDep,
    idempotency_key: Annotated[str | None, Header(max_length=200)] = None,
) -> JSONResponse:
    """Two ways to start an experiment on this server's machine:

    - multipart (the file, params, priority, target and the code bundle): validate the file (422
      with `FILE:LINE:COL` problems), keep the bundle by its sha256, and queue the experiment on
      this machine, or on the registered cluster its target names (400 for a target not
      registered, naming those that are);
    - JSON ``{"from": ID, "params": {...}, "priority": N}`` (clone and enqueue): run again the stored
      file and source snapshot of experiment ID (the rerun rule of `phalanx rerun`) with these
      params over its recorded ones; the new experiment records ID as its origin.

    Answered 201 once the submit is written (the experiment exists, status created); its code is
    unpacked and its supervisor started after the answer. An experiment that could never start
    (bigger than its project's whole quota on the target, or than this machine) is refused (400).
    A file's project the caller is in none of the roles of is refused (404, as if it did not
    exist), and so is, on a team server, one it does not know (a server admin's typo: nothing runs).
    ``Idempotency-Key`` (per user, kept 7 days): a retry of the same request answers the first
    submit's id (200) and starts nothing; the same key with another request is refused (409)."""
    who = principal_of(request)
    check_submitter(settings.box, who)  # a server that cannot box: admins only

    def authorize(project: str) -> None:
        # as a secret's or a quota's project: somebody in none of its roles is answered as for a
        # project they are not in; a server admin, for a project a team server does not know
        require_project(request, project, Role.editor, from_file=True)
        check_project(store, project, from_file=True)

    submitter = Submitter(who.name, authorize)
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind == "application/json":
        result = await _clone(request, store, settings, idempotency_key, submitter)
    elif kind == "multipart/form-data":
        result = await _submit_bundle(request, store, settings, idempotency_key, submitter)
    else:
        raise HTTPException(
            415, 'send multipart/form-data (a file and its code bundle) or application/json ({"from": ID})'
        )
    mark_audited(request)  # written with the experiment (a replay changed nothing)
    if result.created:
        request.app.state.launcher.wake(result.experiment_id)
    out = SubmittedOut(
        id=result.experiment_id, bundle_sha256=result.bundle_sha256, created=result.created, kind=result.kind
    )
    return JSONResponse(out.model_dump(), status_code=201 if result.created else 200)


async def _clone(
    request: Request,
    store: LocalStore,
    settings: ServerSettings,
    idempotency_key: str | None,
    who: Submitter,
) -> SubmitResult:
    """The JSON form: run experiment ``from`` again."""
    try:
        body = CloneIn.model_validate_json(await request.body())
    except ValidationError as exc:
        raise RequestValidationError(_located(exc.errors(), "body")) from None
    typed = parse_param_overrides(f"{name}={text}" for name, text in body.texts.items())
    if body.target is not None:  # a target the server lacks: said before the origin is looked up
        await run_in_threadpool(cluster_of, settings.store, body.target)
    origin = await run_in_threadpool(require_experiment, request, body.origin, Role.editor)
    return await anyio.to_thread.run_sync(
        clone,
        store,
        settings.store,
        CloneRequest(
            origin=origin.id,  # as the caller's prefix named it among their projects
            params={**body.params, **typed},
            priority=body.priority,
            attempt=body.attempt,
            extra_params=body.extra_params,
            latest_data=body.latest_data,
            idempotency_key=idempotency_key,
            target=body.target,
        ),
        who,
        limiter=request.app.state.submit_slots,  # a burst waits here, not in the request threads
    )


async def _submit_bundle(
    request: Request,
    store: LocalStore,
    settings: ServerSettings,
    idempotency_key: str | None,
    who: Submitter,
) -> SubmitResult:
    """The multipart form: an experiment file, its params and its code bundle (a .tar.gz)."""
    async with request.form() as form:
        bundle = form.get("bundle")
        try:
            fields = SubmitForm.model_validate({k: v for k, v in form.items() if isinstance(v, str)})
        except ValidationError as exc:
            raise RequestValidationError(_located(exc.errors(), "form")) from None
        if not isinstance(bundle, StarletteUploadFile):
            missing = {"loc": ("form", "bundle"), "msg": "a .tar.gz file is required"}
            raise RequestValidationError([missing])
        data = await bundle.read()
    return await anyio.to_thread.run_sync(
        submit,
        store,
        settings.store,
        SubmitRequest(
            file_name=fields.file_name,
            file_text=fields.file_text,
            params=parse_params(fields.params),
            priority=fields.priority,
            bundle=data,
            extra_params=fields.extra_params,
            idempotency_key=idempotency_key,
            target=fields.target,
        ),
        who,
        limiter=request.app.state.submit_slots,  # a burst waits here, not in the request threads
    )


def _located(errors: Any, where: str) -> list[dict[str, Any]]:
    return [{**e, "loc": (where, *e.get("loc", ()))} for e in errors]


@router.get("/experiments/{experiment_id}/submission", response_model=SubmissionOut)
@policy("experiment:viewer")
def get_submission(experiment_id: str, store: StoreDep) -> SubmissionOut:
    """The code bundle a submitted experiment ran; 404 for one not submitted to this server."""
    e = experiment_of(store, experiment_id)
    found = store.submission(e.id)
    if found is None:
        raise NotFound(f"experiment {e.id} was not submitted to this server (it was started on its machine)")
    return SubmissionOut(id=found.id, bundle_sha256=found.bundle_sha256, submitted_at=found.submitted_at)


@router.get("/targets", response_model=list[TargetOut])
@policy("signed-in")
def list_targets(settings: SettingsDep) -> list[TargetOut]:
    """Where a submit may run: ``local`` (this server's machine) and each cluster registered in the
    server's home (`phalanx cluster add` there), by name and kind only."""
    return [TargetOut(**t) for t in targets(settings.store)]
