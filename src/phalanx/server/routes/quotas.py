"""Project quotas over HTTP: ``GET``/``PUT``/``DELETE /projects/{project}/quota`` and ``GET /quotas``.

Kept in a module of its own so that a policy (who may change a project's quota: its admins) can be
attached to these routes alone. A PUT replaces the whole quota of the project on the target; a
missing field is no limit. Validation is the store's (``phalanx.store.quotas.check``), so the CLI
and the API refuse the same mistakes with the same words (400).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel, Field

from phalanx.errors import UsageError
from phalanx.server.audit import describe
from phalanx.server.deps import StoreDep
from phalanx.server.policy import policy
from phalanx.share import LOCAL, Limit, Quota
from phalanx.spec.quantities import parse_memory
from phalanx.store import quotas

router = APIRouter(tags=["quotas"])

LARGEST = 10**9  # far beyond any machine, well within every database's integer

TargetQuery = Annotated[str, Query(max_length=100, description="the compute target; 'local' is this machine")]


class QuotaIn(BaseModel):
    target: str = Field(default=LOCAL, max_length=100, description="'local' is the server's own machine")
    cores: int | None = Field(default=None, ge=0, le=LARGEST, description="cores held at once")
    gpus: int | None = Field(default=None, ge=0, le=LARGEST, description="GPUs held at once")
    memory: float | str | None = Field(
        default=None,
        description="memory they may hold at once: MiB as a number, or a size such as '8Gi'",
    )
    max_waiting: int | None = Field(default=None, ge=0, le=LARGEST, description="experiments that may wait")


class QuotaOut(BaseModel):
    project: str
    target: str
    set: bool = Field(description="false: no quota (no limit) for the project on this target")
    cores: int | None
    gpus: int | None
    memory_mib: float | None
    max_waiting: int | None


def _out(project: str, target: str, quota: Quota | None) -> QuotaOut:
    limit = Limit() if quota is None else quota.limit
    return QuotaOut(
        project=project,
        target=target,
        set=quota is not None,
        cores=limit.cores,
        gpus=limit.gpus,
        memory_mib=limit.memory_mib,
        max_waiting=limit.max_waiting,
    )


def memory_mib(value: float | str | None) -> float | None:
    """MiB from a number or a size such as '8G' or '512Mi' (as experiment files write memory)."""
    if value is None:
        return None
    if isinstance(value, str) and len(value) > 40:
        raise UsageError("memory: give MiB as a number, or a size such as '8Gi'")
    try:
        mib = parse_memory(value)
    except ValueError as exc:
        raise UsageError(f"memory: {exc}") from None
    if not mib < 2.0**60:  # also NaN
        raise UsageError(f"memory {value!r}: larger than any machine; give MiB, or a size such as '8Gi'")
    return mib


@router.get("/projects/{project}/quota", response_model=QuotaOut)
@policy("project:viewer")
def get_quota(project: str, store: StoreDep, target: TargetQuery = LOCAL) -> QuotaOut:
    """The project's quota on the target (``set`` false, every limit null: none)."""
    return _out(project, target, quotas.get(store, project, target))


@router.put("/projects/{project}/quota", response_model=QuotaOut)
@policy("site:admin")
def put_quota(project: str, body: QuotaIn, store: StoreDep, request: Request) -> QuotaOut:
    """Set (replace) the project's quota on ``body.target``; running experiments keep what they hold,
    waiting ones are judged by the new quota within seconds."""
    limit = Limit(
        cores=body.cores, gpus=body.gpus, memory_mib=memory_mib(body.memory), max_waiting=body.max_waiting
    )
    before = quotas.get(store, project, body.target)
    quota = quotas.put(store, Quota(project, body.target, limit))
    describe(request, "quota.set", f"{project}/{body.target}", project, _limits(quota), _limits(before))
    return _out(project, body.target, quota)


def _limits(quota: Quota | None) -> str | None:
    """A quota's limits in one line for the audit trail (None: no quota)."""
    if quota is None:
        return None
    limit = quota.limit
    parts = [("cores", limit.cores), ("gpus", limit.gpus), ("memory_mib", limit.memory_mib)]
    parts.append(("max_waiting", limit.max_waiting))
    return " ".join(f"{k}={v:g}" for k, v in parts if v is not None) or "none"


@router.delete("/projects/{project}/quota", status_code=204)
@policy("site:admin")
def delete_quota(project: str, store: StoreDep, request: Request, target: TargetQuery = LOCAL) -> Response:
    """Remove the project's quota on the target (404 when it has none, or, on a team server, for a
    project it does not know)."""
    before = quotas.get(store, project, target)
    quotas.remove(store, project, target)
    describe(request, "quota.remove", f"{project}/{target}", project, None, _limits(before))
    return Response(status_code=204)


@router.get("/quotas", response_model=list[QuotaOut])
@policy("site:admin")
def list_quotas(
    store: StoreDep, target: Annotated[str | None, Query(max_length=100)] = None
) -> list[QuotaOut]:
    """Every project's quota (on one target with ``?target=``)."""
    return [_out(q.project, q.target, q) for q in quotas.list_quotas(store, target)]
