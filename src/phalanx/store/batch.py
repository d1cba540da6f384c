"""What a batch of events becomes in the store, checked without touching a database: the rows of
each event (``collect``), and the rules a name or a value must follow to be stored (``name``,
``clean``, ``check_event``). Pure Python, shared by the SQL store (``store.sql.events`` writes the
rows) and by ingest and the server, which refuse a malformed event before any transaction.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from phalanx.domain import Event, EventKind, ExperimentStatus, ReplicaState
from phalanx.errors import UsageError
from phalanx.spool import decode_points
from phalanx.store.paramshape import check_param
from phalanx.tracking.screen import truncate, truncate_line


@dataclass(frozen=True)
class ScalarBlock:
    """Points of one event as columns; ``idx[i]`` indexes ``keys`` (None: every point has keys[0])."""

    experiment_id: str
    replica: str
    rank: int | None
    keys: list[tuple[str, str]]
    idx: Sequence[int] | None
    steps: Sequence[int]
    values: Sequence[float]
    times: Sequence[float]
    attempt: int | None = None  # a later attempt's points replace an earlier one's (store.sql.attempts)


@dataclass
class Batch:
    """The rows a batch of events produces, built without touching the database."""

    scalars: list[ScalarBlock] = field(default_factory=list)
    params: list[dict[str, Any]] = field(default_factory=list)
    texts: list[dict[str, Any]] = field(default_factory=list)
    logs: dict[tuple[str, str], list[tuple[str, str, float]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    artifacts: list[dict[str, Any]] = field(default_factory=list)
    models: list[dict[str, Any]] = field(default_factory=list)
    experiments: list[Event] = field(default_factory=list)
    statuses: list[tuple[Event, ExperimentStatus]] = field(default_factory=list)
    repros: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


def collect(events: Sequence[Event]) -> Batch:
    """Rows of the events; UsageError naming the first malformed event (nothing is written)."""
    batch = Batch()
    for i, ev in enumerate(events):
        try:
            _collect_one(batch, ev)
        except UsageError as exc:
            raise UsageError(
                f"event {i} ({ev.kind}, stream {ev.stream!r} seq {ev.seq}): {exc.message}"
            ) from None
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
            raise UsageError(
                f"event {i} ({ev.kind}, stream {ev.stream!r} seq {ev.seq}) is malformed: {exc!r}"
            ) from None
    return batch


def check_event(ev: Event) -> None:
    """UsageError if the event cannot be stored (what the server answers 400 for)."""
    collect([ev])


def check_log(d: Mapping[str, Any]) -> None:
    """``check_event`` of a LOG event's data without building its rows: ingest checks every record
    before its batch's transaction, and a chatty replica's lines were cut and cleaned twice."""
    text_field(d, "stream", "stdout", limit=16)
    _log_lines(d)


def _collect_one(batch: Batch, ev: Event) -> None:
    kind = EventKind(ev.kind)
    d = ev.data
    if kind is EventKind.SCALAR:
        block = scalar_block(ev)
        for title, series in block.keys:
            name(title), name(series)
        batch.scalars.append(block)
    elif kind is EventKind.PARAM:
        batch.params.extend(_param_rows(ev))
    elif kind is EventKind.TEXT:
        step = d.get("step")
        batch.texts.append(
            {
                "experiment_id": ev.experiment_id,
                "title": name(text_field(d, "title")),
                "text": clean(truncate(text_field(d, "text"))),
                "step": None if step is None else int(step),
                "replica": ev.replica,
                "rank": ev.rank,
                "time": ev.time,
                "attempt": ev.attempt,
            }
        )
    elif kind is EventKind.LOG:
        stream = text_field(d, "stream", "stdout", limit=16)
        for line in _log_lines(d):
            batch.logs[(ev.experiment_id, ev.replica)].append((clean(truncate_line(line)), stream, ev.time))
    elif kind is EventKind.ARTIFACT:
        batch.artifacts.append(
            {
                "experiment_id": ev.experiment_id,
                "name": name(text_field(d, "name", None)),
                "kind": text_field(d, "kind", "file", limit=16),
                "path": text_field(d, "path", None),
                "size": int(d.get("size", 0)),
                "content_type": text_field(d, "content_type", "application/octet-stream", limit=128),
                "replica": ev.replica,
                "rank": ev.rank,
                "time": ev.time,
                "meta": _jsonable(_object(d, "metadata")),
            }
        )
    elif kind is EventKind.MODEL:
        batch.models.append(
            {
                "experiment_id": ev.experiment_id,
                "name": name(text_field(d, "name", None)),
                "format": text_field(d, "format", limit=32),
                "path": text_field(d, "path", None),
                "size": int(d.get("size", 0)),
                "replica": ev.replica,
                "time": ev.time,
                "meta": _jsonable(_object(d, "metadata")),
            }
        )
    elif kind is EventKind.EXPERIMENT:
        batch.experiments.append(ev)
    elif kind is EventKind.STATUS:
        # what _status_from_event converts inside the transaction, converted here first: a bad
        # replica_state or exit_code is a malformed event (400), not an internal error
        if d.get("replica_state"):
            ReplicaState(str(d["replica_state"]))
        for field_name in ("exit_code", "replica_exit_code"):
            if d.get(field_name) is not None and not -(2**31) <= int(d[field_name]) < 2**31:
                raise ValueError(f"{field_name} {d[field_name]} is out of range")
        text_field(d, "reason")
        text_field(d, "replica_reason")
        batch.statuses.append((ev, ExperimentStatus(d["status"])))
    elif kind is EventKind.REPRO:
        record = d.get("record")
        if not isinstance(record, Mapping):
            raise UsageError("a repro record needs 'record': an object (what phalanx.repro collects)")
        record = _jsonable(dict(record))
        snapshot = record.get("snapshot")
        if isinstance(snapshot, Mapping):  # the snapshot's bytes are the file this event names
            record["snapshot"] = {**snapshot, "path": str(d["path"])}
        batch.repros.append((ev.experiment_id, record))


def qualified_name(wanted: str, replica: str, rank: int | None = None, limit: int = 255) -> str:
    """The name an upload gets when another writer holds ``wanted``: ``"temp [worker-0 rank 1]"``."""
    suffix = f" [{replica}]" if rank is None else f" [{replica} rank {rank}]"
    return wanted[: max(limit - len(suffix), 1)] + suffix


def scalar_block(ev: Event) -> ScalarBlock:
    """A SCALAR event's points, in any of its three shapes: columns (``encode_points``, what the SDK
    writes), ``points`` ([[title, series, step, value, time?], ...]) or one point. UsageError if
    malformed."""
    d = ev.data
    try:
        if "keys" in d:
            keys, idx, steps, values, times = decode_points(d)
            return ScalarBlock(
                ev.experiment_id, ev.replica, ev.rank, keys, idx, steps, values, times, ev.attempt
            )
        points = d.get("points")
        if points is None:
            step = d.get("step", d.get("iteration", 0))
            points = [[d["title"], d["series"], step, d["value"], d.get("time", ev.time)]]
        index: dict[tuple[str, str], int] = {}
        idx_list = [index.setdefault((str(p[0]), str(p[1])), len(index)) for p in points]
        return ScalarBlock(
            ev.experiment_id,
            ev.replica,
            ev.rank,
            list(index),
            idx_list,
            [int(p[2]) for p in points],
            [float(p[3]) for p in points],
            [float(p[4]) if len(p) > 4 else ev.time for p in points],
            ev.attempt,
        )
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise UsageError(f"malformed scalar event: {exc!r}") from None


def _param_rows(ev: Event) -> list[dict[str, Any]]:
    d = ev.data
    section = name(text_field(d, "section") or "General")
    if "values" in d and not isinstance(d["values"], Mapping):
        raise UsageError(f"data.values must be an object of parameters, not {_json_type(d['values'])}")
    values: Mapping[str, Any] = d["values"] if "values" in d else {text_field(d, "key", None): d.get("value")}
    for k, v in values.items():
        check_param(section, str(k), v, f"data.values.{k}" if "values" in d else "data.value")
    return [
        {
            "experiment_id": ev.experiment_id,
            "section": section,
            "key": name(k),
            "value": _jsonable(v),
            "replica": ev.replica,
            "rank": ev.rank,
            "time": ev.time,
        }
        for k, v in values.items()
    ]


def _jsonable(value: Any) -> Any:
    """A JSON column value. NaN/Infinity are not JSON (PostgreSQL refuses the row, so the whole batch;
    jq refuses the CLI's output): a non-finite float is kept as its text, "nan", "inf" or "-inf"."""
    try:
        json.dumps(value, allow_nan=False)
        return value
    except (TypeError, ValueError):
        pass
    if isinstance(value, float):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return str(value)


def name(value: Any, limit: int = 255) -> str:
    """A title, series, key, section or artifact name as stored: UsageError if PostgreSQL would
    refuse it (too long, a NUL), so one bad name is refused alone instead of failing its batch."""
    text = str(value)
    if len(text) > limit:
        raise UsageError(f"name {text[:40]!r}... is longer than {limit} characters")
    if "\x00" in text:
        raise UsageError(f"name {text!r} contains a NUL character")
    return text


_JSON_TYPES = {dict: "an object", list: "a list", bool: "true or false", str: "text", int: "a number"}


def _json_type(value: Any) -> str:
    return _JSON_TYPES.get(type(value), "a number" if isinstance(value, float) else type(value).__name__)


def _object(data: Mapping[str, Any], field: str) -> dict[str, Any]:
    """An object field of an event's data ({} when absent); UsageError naming it otherwise."""
    value = data.get(field)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise UsageError(f"data.{field} must be an object, not {_json_type(value)}")
    return dict(value)


def text_field(
    data: Mapping[str, Any], field: str, default: str | None = "", limit: int | None = None
) -> str:
    """A text field of an event's data (absent or null: ``default``). UsageError naming the field
    when it holds another JSON type (an object would otherwise be stored as its Python text) or is
    longer than its column (``limit``: PostgreSQL refuses the row, SQLite would keep it). A number
    is taken as its text. ``default`` None: the field is required."""
    value = data.get(field)
    if value is None:
        if default is None:
            raise UsageError(f"data.{field} is missing")
        return default
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise UsageError(f"data.{field} must be text, not {_json_type(value)}")
    text = str(value)
    if limit is not None and len(text) > limit:
        raise UsageError(f"data.{field} {text[:40]!r} is longer than {limit} characters")
    return text


def clean(value: Any) -> str:
    """Free text (console lines, report_text) as stored: NUL (which PostgreSQL refuses) replaced."""
    text = str(value)
    return text.replace("\x00", "\ufffd") if "\x00" in text else text


def _log_lines(d: Mapping[str, Any]) -> list[str]:
    if "lines" in d:
        lines = d["lines"]
        if not isinstance(lines, list):  # a text would be stored one character a line
            raise ValueError(f"'lines' must be a list of lines, not {type(lines).__name__}")
        if not all(type(x) is str for x in lines):  # the SDK's lines are texts: check the rest
            for i, x in enumerate(lines):
                text_field({f"lines[{i}]": x}, f"lines[{i}]", None)
        return [str(x) for x in lines]
    text = text_field(d, "text")
    lines = text.split("\n")
    if lines and lines[-1] == "" and len(lines) > 1:
        lines.pop()
    return lines
