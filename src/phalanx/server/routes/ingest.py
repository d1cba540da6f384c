"""What remote replicas send: batches of spool records, and artifact bytes.

The tracking SDK keeps its spool as a write-ahead log and re-sends a batch until the server accepts
it; the store skips events whose (stream, seq) it already holds, so a re-sent batch is harmless
(``accepted`` counts only the new ones). Artifact bytes are PUT before the ARTIFACT event that names
them, under the experiment's folder of the artifact store.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request

from phalanx.errors import UsageError
from phalanx.server.deps import FilesDep, StoreDep, experiment_of
from phalanx.server.files import safe_relpath
from phalanx.server.schemas import FileOut, IngestIn, IngestOut

router = APIRouter(tags=["ingest"])


@router.post("/ingest", response_model=IngestOut)
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
        if not isinstance(experiment_id, str) or not experiment_id:
            raise UsageError("every event needs an experiment id")
    return IngestOut(accepted=store.write_events(events))


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
