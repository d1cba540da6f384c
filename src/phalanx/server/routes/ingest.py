"""What remote replicas send: batches of spool records, and artifact bytes.

The tracking SDK keeps its spool as a write-ahead log and re-sends a batch until the server accepts
it; the store skips events whose (experiment, stream, seq) it already holds, so a re-sent batch is
harmless (``accepted`` counts only the new ones). Artifact bytes are PUT before the ARTIFACT event that names
them, under the experiment's folder of the artifact store.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Sequence
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Path, Request
from starlette.concurrency import run_in_threadpool

from phalanx.domain import Event, EventKind, Experiment, ExperimentStatus
from phalanx.errors import Conflict, NotFound, UsageError
from phalanx.server.audit import record_launch
from phalanx.server.deps import FilesDep, StoreDep, experiment_of
from phalanx.server.files import safe_relpath
from phalanx.server.policy import policy, principal_of, require, require_project
from phalanx.server.schemas import AttemptIn, AttemptOut, FileOut, IngestIn, IngestOut
from phalanx.share import DEFAULT_PROJECT
from phalanx.store.accounts import Role, check_project
from phalanx.store.base import LocalStore, Store
from phalanx.store.spool_records import records_to_events

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
@policy("body")
def ingest(batch: IngestIn, store: StoreDep, request: Request) -> IngestOut:
    """Store a batch of spool records (``{"events": [...]}``), exactly once per (experiment, stream, seq).

    Refused whole: 403 when a replica token sends another experiment's records; 404 for an
    experiment that does not exist (unless the batch creates it: a plain script's ``experiment``
    record); 409 for a ``status`` or ``repro`` record of an experiment a supervisor owns."""
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
                ", at most 32 (Phalanx makes 12 hex digits)"
            )
    for i, ev in enumerate(events):
        _check_time(i, ev.time)
    check_owners(store, events, getattr(request.state, "experiment_scope", None))
    created = authorize_batch(request, store, events)
    # a number the database cannot hold (a step beyond 64 bits) is the store's UsageError (400)
    accepted = store.write_events(events)
    for experiment_id in created:
        record_launch(request, "experiment", experiment_id)
    return IngestOut(accepted=accepted)


def authorize_batch(request: Request, store: LocalStore, events: Sequence[Event]) -> list[str]:
    """A person's token (not a replica's) writes only experiments of projects they edit, and
    creates plain-script experiments only there, in a project the server knows (a server admin's
    `Task.init(project_name=...)` typo or `phalanx sync` of another machine's project makes no
    project nobody is a member of, as a submit does not). Returns the ids the batch creates."""
    who = principal_of(request)
    creating = {ev.experiment_id: ev for ev in events if ev.kind is EventKind.EXPERIMENT}
    new = [i for i in sorted(creating) if _exact(store, i) is None]
    if who.replica_of is not None:
        return new
    for experiment_id in new:
        project = str(creating[experiment_id].data.get("project") or DEFAULT_PROJECT)
        require_project(request, project, Role.editor)
        check_project(store, project)
    if who.superuser:
        return new
    for experiment_id in sorted({ev.experiment_id for ev in events} - set(new)):
        current = _exact(store, experiment_id)
        if current is not None:  # check_owners refused records of one that does not exist
            require(request, current.project, Role.editor, f"experiment {experiment_id}")
    return new


def check_owners(store: Store, events: Sequence[Event], scope: str | None) -> None:
    """What the sender may write (the batch is refused whole, nothing written):

    - a replica token (``scope``) writes only its own experiment, and never creates one;
    - records of an experiment that does not exist are refused, except in a batch holding the
      ``experiment`` record of a plain script (``Task.init`` outside ``phalanx run``) creating it;
    - a ``status`` record decides only a plain script's status (backend "script"): an experiment a
      supervisor runs gets its status from that supervisor, and an ended one stays ended;
    - a ``repro`` record (what ran: commit, diff, packages, snapshot) likewise only a plain script's.
    """
    ids = {ev.experiment_id for ev in events}
    if scope is not None and ids - {scope}:
        others = ", ".join(sorted(ids - {scope}))
        raise HTTPException(
            403, f"this replica token belongs to experiment {scope}; it cannot write experiment {others}"
        )
    creating = {ev.experiment_id for ev in events if ev.kind is EventKind.EXPERIMENT}
    repros = {ev.experiment_id for ev in events if ev.kind is EventKind.REPRO}
    statuses: dict[str, list[ExperimentStatus]] = {}
    for ev in events:
        if ev.kind is EventKind.STATUS:
            statuses.setdefault(ev.experiment_id, []).append(ExperimentStatus(ev.data["status"]))
    for experiment_id in sorted(ids):
        current = _exact(store, experiment_id)
        if current is None:
            if experiment_id in creating and scope is None:
                continue
            raise NotFound(
                f"experiment {experiment_id} does not exist: records are accepted only for an existing "
                "experiment (or with the 'experiment' record of a plain script that creates it)"
            )
        if scope is not None:
            refuse_ended(current)
        if current.backend != "script" and experiment_id in repros:
            raise Conflict(
                f"experiment {experiment_id} is run by a supervisor ({current.backend or 'local'}); it "
                "records what the experiment ran, a 'repro' record cannot"
            )
        wanted = statuses.get(experiment_id)
        if not wanted:
            continue
        if current.backend != "script":
            raise Conflict(
                f"experiment {experiment_id} is run by a supervisor ({current.backend or 'local'}); only it "
                "decides the status, a 'status' record cannot"
            )
        if current.status.done and any(not s.done for s in wanted):
            raise Conflict(f"experiment {experiment_id} has ended ({current.status}); it cannot run again")


# How long after an experiment ended its replicas' tokens still write (a last batch retried late).
REPLICA_GRACE_SECONDS = 3600.0


def refuse_ended(experiment: Experiment) -> None:
    """403 when a replica token writes an experiment that ended more than REPLICA_GRACE_SECONDS
    ago: a token left in a finished pod's environment must not rewrite its records or replace its
    model files afterwards. Resuming the experiment makes its token write again."""
    finished = experiment.finished_at
    if experiment.status.done and finished is not None and time.time() - finished > REPLICA_GRACE_SECONDS:
        raise HTTPException(
            403,
            f"experiment {experiment.id} ended ({experiment.status}) over {REPLICA_GRACE_SECONDS / 60:.0f} "
            "minutes ago: its replica token no longer writes it",
        )


def _exact(store: Store, experiment_id: str) -> Experiment | None:
    """The experiment with exactly this id (get_experiment also accepts a prefix), else None."""
    try:
        found = store.get_experiment(experiment_id)
    except NotFound:
        return None
    return found if found.id == experiment_id else None


# Ids end up in URLs and artifact folders: nothing that could name another folder ('..', '/', NUL).
SAFE_ID = re.compile(r"[A-Za-z0-9_-]{1,32}")  # the id column holds 32


def _check_time(i: int, when: float) -> None:
    """UsageError naming the record when its time is not finite (its integers are checked where
    every door reads records, ``store.spool_records.record_to_event``)."""
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
@policy("experiment:editor")
async def put_file(
    experiment_id: str,
    path: Annotated[str, Path(description="relative to the experiment's folder; cannot leave it")],
    request: Request,
    store: StoreDep,
    files: FilesDep,
) -> FileOut:
    """Write the raw request body to ``path`` in the experiment's artifact folder (replacing it)."""
    clean = safe_relpath(path)
    e = await run_in_threadpool(experiment_of, store, experiment_id)
    scope = getattr(request.state, "experiment_scope", None)
    if scope is not None and e.id != scope:  # a replica token names its experiment in full
        raise HTTPException(403, f"this replica token belongs to experiment {scope}")
    if scope is not None:
        refuse_ended(e)
    size = await files.write_stream(e.id, clean, request.stream())
    return FileOut(path=clean, size=size)


@router.post("/experiments/{experiment_id}/attempts/next", response_model=AttemptOut)
@policy("experiment:editor")
def next_attempt(experiment_id: str, body: AttemptIn, store: StoreDep, request: Request) -> AttemptOut:
    """The attempt number of a replica's new start, asked by the pod's entry each time its container
    starts: Kubernetes restarts pods itself, so only the server can count them
    (docs/clusters.md#pods-restarted-by-kubernetes). A replica token may ask for its own
    experiment only, and not once it has ended."""
    e = experiment_of(store, experiment_id)
    scope = getattr(request.state, "experiment_scope", None)
    if scope is not None and e.id != scope:
        raise HTTPException(403, f"this replica token belongs to experiment {scope}")
    if scope is not None:
        refuse_ended(e)
    number = store.next_attempt(e.id, body.replica, body.at_least)
    if number > 2**31 - 1:
        raise UsageError(f"replica {body.replica} of {e.id}: attempt {number} is past 2^31-1")
    return AttemptOut(attempt=number)
