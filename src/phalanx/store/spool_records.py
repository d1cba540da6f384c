"""A spool record (or an item a client POSTs to the server's ingest endpoint) as an Event, checked
field by field before any transaction: a malformed record is refused with the field it got wrong
(UsageError), never met inside the store. ``phalanx.ingest`` converts spool files with it, the
server's ingest endpoint the records arriving over HTTP."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from phalanx.domain import Event, EventKind
from phalanx.errors import UsageError
from phalanx.spool import check_columns
from phalanx.store.artifacts import ArtifactStore, safe_path
from phalanx.store.batch import check_event, check_log, text_field
from phalanx.tracking.labels import MAX_TAG, label_problem
from phalanx.tracking.screen import step_problem

FILE_KINDS = (EventKind.ARTIFACT.value, EventKind.MODEL.value, EventKind.REPRO.value)


def _integer(value: Any, field: str, bits: int = 64) -> int:
    """An integer field of a record, naming the field when it is not one or does not fit the
    column's ``bits`` (a number the database cannot hold would make the stream's every later batch
    fail). A fractional number is refused, not truncated: seq 1.5 read as 1 would be taken for a
    re-sent event and dropped."""
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise UsageError(f"event {field!r} must be an integer, not {value!r}")
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        raise UsageError(f"event {field!r} must be an integer, not {value!r}") from None
    if not -(2 ** (bits - 1)) <= number < 2 ** (bits - 1):
        raise UsageError(f"event {field!r} {number} is out of range (a {bits}-bit integer)")
    return number


def _check_steps(ev: Event) -> None:
    """UsageError naming the point whose step is beyond 64 bits (JSON integers have no bound; the
    SDK's packed form cannot hold one): stored, it would fail the whole batch at every retry, and
    every later record of its stream with it. Anything else malformed is the store's to say."""
    if ev.kind not in (EventKind.SCALAR, EventKind.TEXT) or "keys" in ev.data:
        return
    points = ev.data.get("points") if ev.kind is EventKind.SCALAR else None
    if isinstance(points, list):
        steps = [(f"points[{j}] step", p[2]) for j, p in enumerate(points) if isinstance(p, list) and p[2:]]
    else:
        steps = [("step", ev.data.get("step", ev.data.get("iteration")))]
    for where, value in steps:
        try:
            number = int(value) if isinstance(value, (int, str)) and not isinstance(value, bool) else None
        except ValueError:
            continue  # not a number at all: the store names it
        if number is not None and step_problem(number):
            raise UsageError(f"{where} {number} is out of range (a 64-bit integer)")


def record_to_event(record: Mapping[str, Any]) -> Event:
    """One spool record (or one item of a POSTed ``{"events": [...]}``) as an Event.
    UsageError, naming the field, when it is malformed."""
    if not isinstance(record, Mapping):
        raise UsageError("an event must be a JSON object")
    try:
        kind = EventKind(record["kind"])
    except KeyError:
        raise UsageError("event has no 'kind'") from None
    except ValueError:
        raise UsageError(
            f"unknown event kind {record.get('kind')!r}; one of {', '.join(k.value for k in EventKind)}"
        ) from None
    exp = record.get("experiment_id")
    if exp is None or exp == "":
        raise UsageError("event has no 'experiment_id'")
    if not isinstance(exp, str):
        raise UsageError(f"event 'experiment_id' must be text, not {exp!r}")
    data = record.get("data") or {}
    if not isinstance(data, Mapping):
        raise UsageError("event 'data' must be an object")
    if kind.value in FILE_KINDS:
        if "name" not in data or "path" not in data:
            raise UsageError(f"{kind.value} event needs 'name' and 'path' in its data")
        data = {k: v for k, v in data.items() if k != "spool_path"}
        data["path"] = safe_path(text_field(data, "path", None))
    if kind is EventKind.EXPERIMENT:
        data = _clean_created(data)
    seq = _integer(record.get("seq", 0), "seq")
    index = _integer(record.get("index", 0) or 0, "index", 32)
    rank = record.get("rank")
    rank = None if rank is None or rank == "" else _integer(rank, "rank", 32)
    try:
        when = float(record.get("time") or time.time())
    except (TypeError, ValueError):
        raise UsageError(
            f"event 'time' must be seconds since the epoch, not {record.get('time')!r}"
        ) from None
    attempt = record.get("attempt")  # absent in records of writers before attempts: None
    attempt = None if attempt is None or attempt == "" else _integer(attempt, "attempt")
    if attempt is not None and not 0 <= attempt < 2**31:
        raise UsageError(f"event attempt {attempt} is out of range (0 to 2147483647; PHALANX_ATTEMPT)")
    event = Event(
        experiment_id=exp,
        kind=kind,
        data=data,
        replica=str(record.get("replica") or "master"),
        role=str(record.get("role") or "master"),
        index=index,
        rank=rank,
        time=when,
        stream=str(record.get("stream") or ""),
        seq=seq,
        attempt=attempt,
    )
    _check_names(event)
    _check_steps(event)
    if kind is EventKind.SCALAR and "keys" in data:
        try:  # columns: check their shape here; decoding them twice would cost more than storing
            check_columns(data)
        except (KeyError, TypeError, ValueError) as exc:
            raise UsageError(f"malformed scalar columns: {exc}") from None
    elif kind is EventKind.LOG:  # its lines are cut and cleaned once, when they are stored
        try:
            check_log(data)
        except (TypeError, ValueError) as exc:
            raise UsageError(f"malformed log lines: {exc}") from None
    else:
        check_event(event)  # malformed data is refused here, never inside a store transaction
    return event


# The envelope's strings land in columns of bounded length (PostgreSQL enforces them, SQLite does
# not) and PostgreSQL cannot store a NUL: a record either store could not hold is refused here.
ENVELOPE_LIMITS = {"stream": 128, "replica": 64, "role": 16}


def _check_names(event: Event) -> None:
    for field, most in ENVELOPE_LIMITS.items():
        value = getattr(event, field)
        if "\x00" in value:
            raise UsageError(f"event {field} {value[:40]!r} contains a NUL character")
        if len(value) > most:
            raise UsageError(f"event {field} {value[:40]!r}... is longer than {most} characters")


def _text(data: dict[str, Any], field: str, most: int) -> None:
    value = data.get(field)
    if value is None:
        return
    if not isinstance(value, str):
        raise UsageError(f"experiment record: {field} must be text, not {type(value).__name__}")
    data[field] = value.replace("\x00", "")[:most]  # what a column can hold (PostgreSQL: no NUL)


def _clean_created(data: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of a plain script's ``experiment`` record that become columns, made storable:
    a wrong type is a 400 here rather than an internal error inside the store (or tags given as
    text stored as a list of characters); text too long for its column is cut, as a script's long
    name must not lose the whole experiment."""
    out = dict(data)
    for field in ("name", "project"):  # refused (400), not cut: tables and logs show them
        value = out.get(field)
        if isinstance(value, str) and (problem := label_problem(value, field)):
            raise UsageError(f"experiment record: {problem}")
    _text(out, "name", 255)
    _text(out, "project", 255)
    _text(out, "framework", 32)
    _text(out, "host", 255)
    tags = out.get("tags")
    if tags is not None:
        if not isinstance(tags, list) or any(not isinstance(t, str) for t in tags):
            raise UsageError("experiment record: tags must be a list of texts")
        for t in tags:
            if problem := label_problem(t, "tag", MAX_TAG):
                raise UsageError(f"experiment record: {problem}")
        out["tags"] = tags[:100]
    pid = out.get("pid")
    if pid is not None and (not isinstance(pid, int) or isinstance(pid, bool) or not 0 <= pid < 2**31):
        raise UsageError(f"experiment record: pid must be a process id (an integer from 0), not {pid!r}")
    return out


def records_to_events(records: Iterable[Mapping[str, Any]]) -> list[Event]:
    """Spool records as Events (UsageError on the first malformed one; nothing is written)."""
    events = []
    for i, rec in enumerate(records):
        try:
            events.append(record_to_event(rec))
        except UsageError as exc:
            raise UsageError(f"events[{i}]: {exc.message}") from None
    return events


def store_artifact_bytes(artifacts: ArtifactStore, experiment_id: str, path: str, data: bytes) -> int:
    """Store a file's bytes at ``path`` inside the experiment's folder (the server's PUT of a file);
    UsageError if the path would leave the folder. Returns the size."""
    return artifacts.put_bytes(experiment_id, safe_path(path), data)
