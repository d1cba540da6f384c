"""What the store can hold, checked where it is reported, so one bad item never takes good ones with it.

The store refuses a name (metric title or series, text title, parameter key or section) longer than
``NAME_LIMIT`` characters or holding NUL, and a step outside 64 bits. Before this module, one such
point inside a spool record of 10,000 made ingest drop the whole record while ``flush()`` said True.
Now the SDK drops only the bad item when it writes the spool, remembers why, and ``flush()`` returns
False and logs the reasons (``task.flush_problems`` lists them). Texts and console lines longer than
``TEXT_LIMIT`` characters are truncated (documented in docs/reliability.md), because a 17 MiB record
would otherwise be refused by a server's request limit and stall everything after it.

Standard library only (the SDK copy imports it in a bare interpreter).
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, TypeVar

NAME_LIMIT = 255  # the store's column width (phalanx.store.batch.name)
TEXT_LIMIT = 1 << 20  # characters of one report_text or one console line
INT64 = (-(2**63), 2**63 - 1)
MAX_REASONS = 20  # reasons kept per flush: a loop reporting one bad name a million times stays small


def name_problem(value: Any) -> str | None:
    """Why the store would refuse ``value`` as a name, or None."""
    text = str(value)
    if len(text) > NAME_LIMIT:
        return f"name {text[:40]!r}... is {len(text)} characters long (at most {NAME_LIMIT})"
    if "\x00" in text:
        return f"name {text!r} contains a NUL character"
    return None


def step_problem(step: int) -> str | None:
    if not INT64[0] <= step <= INT64[1]:
        return f"step {step} does not fit in 64 bits"
    return None


def truncate(text: str, limit: int = TEXT_LIMIT, sep: str = "\n") -> str:
    """``text`` cut to ``limit`` characters, saying so at its end. A console line takes ``sep=" "``:
    a newline inside one stored line shows as a second line that names no replica."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}{sep}[truncated by phalanx: {len(text) - limit} more characters]"


def truncate_line(line: str) -> str:
    """A console line cut to TEXT_LIMIT characters, the marker on the same line."""
    return truncate(line, sep=" ")


class Problems:
    """Reasons why reported items were not stored, collected since the last ``take()``
    (thread-safe: the writer thread adds, ``flush()`` takes)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reasons: list[str] = []
        self._dropped = 0

    def add(self, reason: str, count: int = 1) -> None:
        with self._lock:
            self._dropped += count
            if len(self._reasons) < MAX_REASONS and reason not in self._reasons:
                self._reasons.append(reason)

    def take(self) -> tuple[int, list[str]]:
        """(items dropped, distinct reasons) since the last call."""
        with self._lock:
            out = (self._dropped, self._reasons)
            self._dropped, self._reasons = 0, []
            return out

    def __bool__(self) -> bool:
        return self._dropped > 0


# title, series, step, value, time (and, in the SDK's queue, the rank of the call)
Point = TypeVar("Point", bound=tuple[Any, ...])


def screen_points(points: Sequence[Point], problems: Problems) -> list[Point]:
    """The points whose names and steps the store accepts; the others are counted in ``problems``.
    Names are checked once per distinct (title, series) pair, not once per point."""
    verdict: dict[tuple[str, str], str | None] = {}
    kept = []
    for p in points:
        why = _names_problem(p[0], p[1], verdict) or step_problem(p[2])
        if why:
            problems.add(f"metric {str(p[0])[:40]!r}/{str(p[1])[:40]!r}: {why}")
        else:
            kept.append(p)
    return kept


def _names_problem(title: Any, series: Any, verdict: dict[tuple[str, str], str | None]) -> str | None:
    """Why the store would refuse this (title, series) pair, or None; ``verdict`` remembers pairs."""
    key = (title, series)
    try:
        if key not in verdict:
            verdict[key] = name_problem(title) or name_problem(series)
    except TypeError:  # unhashable: a list or a dict given as a name (encoding it failed for the chunk)
        name = title if not isinstance(title, Hashable) else series
        return f"a name must be a string, not a {type(name).__name__}"
    return verdict[key]


def names_ok(keys: Sequence[Sequence[str]]) -> bool:
    """Whether every (title, series) pair is a name the store accepts (the cheap common case)."""
    return all(name_problem(t) is None and name_problem(s) is None for t, s in keys)


def screen_event(kind: str, data: Mapping[str, Any], problems: Problems) -> dict[str, Any] | None:
    """An event's data as the store can take it (texts truncated, bad parameter keys left out), or
    None when nothing of it can be stored (the reason is added to ``problems``)."""
    out = dict(data)
    if kind == "text":
        why = name_problem(out.get("title", ""))
        if why:
            problems.add(f"report_text title: {why}")
            return None
        step = out.get("step")
        if isinstance(step, int) and step_problem(step):
            problems.add(f"report_text step: {step_problem(step)}")
            return None
        out["text"] = truncate(str(out.get("text", "")))
    elif kind == "param":
        why = name_problem(out.get("section") or "General")
        if why:
            problems.add(f"parameter section: {why}")
            return None
        values = out.get("values")
        if isinstance(values, Mapping):
            good = {}
            for key, value in values.items():
                why = name_problem(key)
                if why:
                    problems.add(f"parameter {str(key)[:40]!r}: {why}")
                else:
                    good[key] = value
            if not good:
                return None
            out["values"] = good
    elif kind == "log":
        lines = out.get("lines")
        if isinstance(lines, list) and any(len(line) > TEXT_LIMIT for line in lines):
            out["lines"] = [truncate_line(line) for line in lines]
    return out
