"""`phalanx ls`'s work. The read pass every read command starts with (``open_for_reading``) is
``phalanx.readpass``'s, re-exported here for the read commands.

No typer here: ``ls_experiments`` is called by the Typer command (cli/tracking.py) and by the lean
dispatcher (cli/lean.py), which answers a plain `phalanx ls` without importing typer, pydantic or
SQLAlchemy (issue 30: 0.8 CPU-s before, docs/cli-speed.md). When the store is an up-to-date SQLite
file and no upkeep is due, it reads through ``store.lite.LiteReader``; otherwise it opens the full
store exactly as before.
"""

from __future__ import annotations

import json
import sys
import time
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from phalanx.readpass import open_for_reading as open_for_reading
from phalanx.terminal_text import write_shown

if TYPE_CHECKING:
    from phalanx.config import Settings
    from phalanx.domain import Experiment, ExperimentFilter, Page


class Format(StrEnum):
    TABLE = "table"
    JSON = "json"


def list_page(query: ExperimentFilter, settings: Settings, group: str | None = None) -> Page[Experiment]:
    """One page of experiments, after the read pass: through the lean reader when it may (SQLite,
    schema current, no upkeep due, no group to resolve), else through the full store."""
    if group is None:
        from phalanx.readpass import open_lean

        reader = open_lean(settings)
        if reader is not None:
            with reader:
                return reader.list_experiments(query)
    from dataclasses import replace

    store, _ = open_for_reading(settings)
    if group is not None:
        query = replace(query, group_id=store.resolve_group(group))
    return store.list_experiments(query)


def ls_experiments(
    *,
    status: str | None = None,
    project: str | None = None,
    search: str | None = None,
    limit: int = 50,
    output: Format = Format.TABLE,
    group: str | None = None,
    tag: str | None = None,
    where: list[str] | None = None,
    columns: list[str] | None = None,
    store: Any = None,
) -> None:
    """`phalanx ls`: print experiments, newest first (a table, or one JSON document). ``where``:
    the run table's conditions (``metric:min:loss < 0.5 and param:lr > 0.01``), all must hold;
    ``columns``: ``param:KEY`` / ``metric:AGG:TITLE`` values shown for each experiment. ``store``:
    a server's (``RemoteStore``), which resolves a group prefix itself; None: this machine's."""
    from phalanx.config import Settings
    from phalanx.domain import ExperimentFilter, ExperimentStatus
    from phalanx.errors import UsageError

    wanted = None
    if status is not None:
        try:
            wanted = ExperimentStatus(status)
        except ValueError:
            choices = ", ".join(s.value for s in ExperimentStatus)
            raise UsageError(f"--status {status!r}: use one of {choices}") from None
    query = ExperimentFilter(
        status=wanted, project=project, text=search, limit=limit, order_by="-created_at", tag=tag
    )
    values: dict[str, dict[str, Any]] = {}
    if store is not None:
        from dataclasses import replace

        if where or columns:  # the server's run table filters over every experiment it holds
            from phalanx.store.columns import parse_column
            from phalanx.store.filters import parse_filters  # lazily: `phalanx ls` starts fast

            parse_filters(where or [])  # a mistake is told here, as locally, before any request
            for column in columns or []:
                parse_column(column)
            page, values = store.table(replace(query, group_id=group), where or [], columns or [])
        else:
            page = store.list_experiments(replace(query, group_id=group))
    elif where or columns:
        page, values = _filtered_page(query, Settings(), group, where or [], columns or [])
    else:
        page = list_page(query, Settings(), group)
    shown = list(dict.fromkeys(columns or []))
    if output is Format.JSON:
        documents = [e.to_json() for e in page.items]
        if shown:
            for doc, e in zip(documents, page.items, strict=True):
                doc["columns"] = {c: values.get(e.id, {}).get(c) for c in shown}
        emit_json(documents)
        return
    if not page.items:
        given = [
            f
            for f, v in (("--status", status), ("--project", project), ("--search", search), ("--tag", tag))
            if v is not None
        ]
        if group is not None:  # say the filter the user typed, not the ones they did not
            given.append("--group")
        if where:
            given.append("--where")
        if given:
            _echo(f"no experiments match; `phalanx ls` without {'/'.join(given)} lists them all")
        else:
            _echo("no experiments yet: `phalanx run -f FILE` or Task.init() in a script creates one")
        return
    rows = [
        [e.id, e.project, e.name, status_text(e), _when(e.created_at), _duration(e.started_at, e.finished_at)]
        for e in page.items
    ]
    headers = ["id", "project", "name", "status", "created", "duration"]
    if any(getattr(e, "kind", "training") != "training" for e in page.items):  # `phalanx serve` sessions
        headers.append("kind")
        rows = [[*row, getattr(e, "kind", "training")] for row, e in zip(rows, page.items, strict=True)]
    if any(getattr(e, "group_id", None) for e in page.items):  # trials of a group: say which
        headers.append("group")
        rows = [[*row, getattr(e, "group_id", None) or "-"] for row, e in zip(rows, page.items, strict=True)]
    if shown:
        headers.extend(shown)
        rows = [
            [*row, *(_cell(values.get(e.id, {}).get(c)) for c in shown)]
            for row, e in zip(rows, page.items, strict=True)
        ]
    _echo(_table(headers, rows, upper=len(headers) - len(shown)))
    if page.total > len(page.items):
        _echo(f"({len(page.items)} of {page.total}; --limit shows more)")


def _filtered_page(
    query: ExperimentFilter, settings: Settings, group: str | None, where: list[str], columns: list[str]
) -> tuple[Page[Experiment], dict[str, dict[str, Any]]]:
    """`ls --where/--column`: the newest ``query.limit`` experiments that meet every filter (the
    run table's grammar and flow, phalanx.store.selecting), and their column values (from the summary)."""
    from dataclasses import replace

    from phalanx.domain import Page
    from phalanx.store.columns import parse_column
    from phalanx.store.filters import parse_filters  # lazily: `phalanx ls` without --where starts fast
    from phalanx.store.selecting import matching

    flt = parse_filters(where)  # mistakes are told before the store is opened
    for column in columns:
        parse_column(column)
    store, _ = open_for_reading(settings)
    if group is not None:
        query = replace(query, group_id=store.resolve_group(group))
    kept, values = matching(store, query, flt, columns)
    return Page(items=kept[: query.limit], total=len(kept), offset=0, limit=query.limit), values


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def status_text(e: Experiment) -> str:
    """`pending (Resources)`: a waiting experiment says why (the scheduler's reason)."""
    from phalanx.domain import ExperimentStatus

    if e.status is ExperimentStatus.PENDING and e.reason:
        return f"{e.status} ({e.reason})"
    return str(e.status)


# --- formatting ----------------------------------------------------------------------------------


def _echo(text: str) -> None:
    """A line of the listing: names and tags a teammate wrote are shown, not acted on, by a terminal."""
    write_shown(text, sys.stdout)
    sys.stdout.flush()


def emit_json(document: Any) -> None:
    """Print exactly one JSON document on stdout (what `-o json` promises scripts)."""
    sys.stdout.write(json.dumps(document, indent=2, default=str))
    sys.stdout.write("\n")
    sys.stdout.flush()


def _when(t: float | None) -> str:
    return "-" if t is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def _duration(start: float | None, end: float | None) -> str:
    if start is None:
        return "-"
    seconds = (end or time.time()) - start
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def _table(headers: list[str], rows: list[list[str]], upper: int | None = None) -> str:
    """Columns padded to their widest cell as a terminal shows it (``_width``: a CJK character takes
    two columns, a combining mark none); a line break in a cell is shown as ``\\n`` and a lone
    carriage return as ``\\r`` (on a terminal it would write the rest of the cell over the row),
    keeping the row on one line. The first ``upper`` headers (all by default) in capitals (a
    `--column` name is shown as typed, so it can be pasted back)."""
    upper = len(headers) if upper is None else upper
    shown = [[h.upper() if i < upper else h for i, h in enumerate(headers)]]
    shown += [[_one_line(c) for c in r] for r in rows]
    sizes = [[_width(c) for c in r] for r in shown]
    widths = [max(size[i] for size in sizes) for i in range(len(headers))]
    lines = [
        "  ".join(c + " " * (w - n) for c, n, w in zip(r, size, widths, strict=True)).rstrip()
        for r, size in zip(shown, sizes, strict=True)
    ]
    return "\n".join(lines)


def _one_line(cell: str) -> str:
    """``cell`` on one line: its line breaks as ``\\n``, a lone carriage return as ``\\r``."""
    return cell.replace("\r\n", "\\n").replace("\n", "\\n").replace("\r", "\\r")


def _width(text: str) -> int:
    """The columns ``text`` takes on a terminal: East Asian wide and full-width characters two,
    combining marks and zero-width characters none, the rest one (what wcwidth answers for them)."""
    if text.isascii():
        return len(text)
    import unicodedata  # why: only a table with non-ASCII text measures it (the lean `ls`)

    wide = ("W", "F")
    return sum(
        0 if unicodedata.combining(ch) or unicodedata.category(ch) in ("Mn", "Me", "Cf")
        else 2 if unicodedata.east_asian_width(ch) in wide
        else 1
        for ch in text
    )  # fmt: skip
