"""What remote replicas send: batches of spool records, and artifact bytes.

The tracking SDK keeps its spool as a write-ahead log and re-sends a batch until the server accepts
it; the store skips events whose (stream, seq) it already holds, so a re-sent batch is harmless
(``accepted`` counts only the new ones). Artifact bytes are PUT before the ARTIFACT event that names
them, under the experiment's folder of the artifact store.
"""

from __future__ import annotations

import math
import re
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Path, Request

from phalanx.errors import UsageError
from phalanx.server.deps import FilesDep, StoreDep, experiment_of
from phalanx.server.files import safe_relpath
from phalanx.server.schemas import FileOut, IngestIn, IngestOut

router = APIRouter(tags=["ingest"])


def json_body(request: Request) -> None:
    """415 with a plain message when the batch is not sent as JSON (else the answer would be a
    puzzling "Input should be a valid dictionary"). Runs before the body is read."""
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype != "application/json" and not ctype.endswith("+json"):
        raise HTTPException(
            415, f"send the batch as JSON with Content-Type: application/json (got {ctype or 'none'!r})"
        )


@router.post("/ingest", response_model=IngestOut, dependencies=[Depends(json_body)])
def ingest(batch: IngestIn, store: StoreDep) -> IngestOut:
    """Store a batch of spool records (``{"events": [...]}``), exactly once per (stream, seq)."""
    from phalanx.ingest import records_to_events

    if not batch.events:
        return IngestOut(accepted=0)
    try:
        events = records_to_events(batch.events)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise UsageError(f"invalid event record: {exc}") from exc
    for experiment_id in {ev.experiment_id for ev in events}:
        if not isinstance(experiment_id, str) or not SAFE_ID.fullmatch(experiment_id):
            raise UsageError(
                f"invalid experiment id {experiment_id!r}: ids are letters, digits, '-' and '_'"
                " (Phalanx makes 12 hex digits)"
            )
    for i, ev in enumerate(events):
        _check_envelope(i, ev.seq, ev.index, ev.rank, ev.time)
    # a number the database cannot hold (a step beyond 64 bits) is the store's UsageError (400)
    return IngestOut(accepted=store.write_events(events))


INT64 = (-(2**63), 2**63 - 1)
# Ids end up in URLs and artifact folders: nothing that could name another folder ('..', '/', NUL).
SAFE_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _check_envelope(i: int, seq: int, index: int, rank: int | None, when: float) -> None:
    """UsageError naming the record when its integers cannot be stored (the database holds 64-bit
    integers: a bigger one would fail inside the store's transaction) or its time is not finite."""
    for field, value in (("seq", seq), ("index", index), ("rank", rank)):
        if value is not None and not INT64[0] <= value <= INT64[1]:
            raise UsageError(f"events[{i}]: {field} {value} is out of range (a 64-bit integer)")
    if not math.isfinite(when):
        raise UsageError(f"events[{i}]: time must be a finite number of seconds since the epoch")


@router.put(
    "/experiments/{experiment_id}/files/{path:path}",
    response_model=FileOut,
    openapi_extra={
        "requestBody": {
            "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}
        }
    },
)
async def put_file(
    experiment_id: str,
    path: Annotated[str, Path(description="relative to the experiment's folder; cannot leave it")],
    request: Request,
    store: StoreDep,
    files: FilesDep,
) -> FileOut:
    """Write the raw request body to ``path`` in the experiment's artifact folder (replacing it)."""
    from starlette.concurrency import run_in_threadpool

    clean = safe_relpath(path)
    e = await run_in_threadpool(experiment_of, store, experiment_id)
    size = await files.write_stream(e.id, clean, request.stream())
    return FileOut(path=clean, size=size)
