"""Submitting experiments: ``POST /experiments`` (multipart: the file, params, priority, the code
bundle) and ``GET /experiments/{id}/submission`` (which bundle it ran)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, File, Form, Header, Request, UploadFile
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from phalanx.errors import NotFound
from phalanx.server.audit import audit, record_launch
from phalanx.server.deps import SettingsDep, StoreDep, experiment_of
from phalanx.server.policy import policy, require
from phalanx.store.accounts import Role

router = APIRouter(tags=["experiments"])


class SubmittedOut(BaseModel):
    id: str
    bundle_sha256: str = Field(description="sha256 of the code bundle received")
    created: bool = Field(description="false when an earlier submit with the same Idempotency-Key made it")


class SubmissionOut(BaseModel):
    id: str
    bundle_sha256: str
    submitted_at: float


@router.post("/experiments", response_model=SubmittedOut, status_code=201)
@policy("body")
def submit_experiment(
    request: Request,
    store: StoreDep,
    settings: SettingsDep,
    file_name: Annotated[str, Form(max_length=500, description="the file's path in the bundle")],
    file_text: Annotated[str, Form(max_length=1 << 20, description="the experiment file's text")],
    bundle: Annotated[UploadFile, File(description="the submitter's folder, a .tar.gz")],
    params: Annotated[str | None, Form(max_length=1 << 20, description='JSON: {"lr": 0.1}')] = None,
    priority: Annotated[int, Form(ge=-(10**6), le=10**6)] = 0,
    idempotency_key: Annotated[str | None, Header(max_length=200)] = None,
) -> JSONResponse:
    """Validate the file (422 with `FILE:LINE:COL` problems), keep the bundle by its sha256, unpack
    it into a working folder and start the experiment on this machine's queue. A retry with the same
    ``Idempotency-Key`` answers the first submit's id (200) and starts nothing."""
    from phalanx.server.submitting import SubmitRequest, parse_params, submit

    data = bundle.file.read()
    submitted_to: list[str] = []

    def authorize(project: str) -> None:
        require(request, project, Role.editor, f"project {project}")
        submitted_to.append(project)

    result = submit(
        store,
        settings.store,
        SubmitRequest(
            file_name=file_name,
            file_text=file_text,
            params=parse_params(params),
            priority=priority,
            bundle=data,
            idempotency_key=idempotency_key,
        ),
        authorize,
    )
    if result.created:
        record_launch(request, "experiment", result.experiment_id)
        audit(request, "experiment.submit", result.experiment_id, submitted_to[0] if submitted_to else None)
    out = SubmittedOut(id=result.experiment_id, bundle_sha256=result.bundle_sha256, created=result.created)
    return JSONResponse(out.model_dump(), status_code=201 if result.created else 200)


@router.get("/experiments/{experiment_id}/submission", response_model=SubmissionOut)
@policy("experiment:viewer")
def get_submission(experiment_id: str, store: StoreDep) -> SubmissionOut:
    """The code bundle a submitted experiment ran; 404 for one not submitted to this server."""
    from phalanx.store.submissions import get

    e = experiment_of(store, experiment_id)
    found = get(store, e.id)
    if found is None:
        raise NotFound(f"experiment {e.id} was not submitted to this server (it was started on its machine)")
    return SubmissionOut(
        id=found.experiment_id, bundle_sha256=found.bundle_sha256, submitted_at=found.submitted_at
    )
