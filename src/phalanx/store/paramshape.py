"""How deep and how big one hyperparameter's value may be.

Why: a value nested 900 levels deep was stored (``{"accepted": 1}``) and then every page that
showed it answered 500 (the JSON encoder stops at a depth), the run table included as soon as the
key was a column. So ingest refuses such a value with a 400 that names it (``check_param``), and
what was stored before the bound is shown as a short note instead (``shown``): one experiment's
data never breaks a page. Depth is measured without recursion (a deep value must not exhaust the
stack of the code that checks it).
"""

from __future__ import annotations

import json
from typing import Any

from phalanx.errors import UsageError

MAX_PARAM_DEPTH = 32  # levels of nested objects/lists in one value (a config tree rarely has 6)
MAX_PARAM_BYTES = 64 * 1024  # one value as JSON; bigger belongs in an artifact


def depth(value: Any, stop: int = MAX_PARAM_DEPTH + 1) -> int:
    """Nesting depth of a JSON value (a scalar is 0, ``[1]`` is 1), counted up to ``stop``."""
    deepest = 0
    todo: list[tuple[Any, int]] = [(value, 0)]
    while todo:
        v, d = todo.pop()
        if isinstance(v, dict | list | tuple):
            d += 1
            deepest = max(deepest, d)
            if deepest >= stop:
                return deepest
            todo.extend((x, d) for x in (v.values() if isinstance(v, dict) else v))
    return deepest


def problem(value: Any) -> str | None:
    """Why a value cannot be stored as a param, or None."""
    d = depth(value)
    if d > MAX_PARAM_DEPTH:
        return f"nested more than {MAX_PARAM_DEPTH} levels deep (at least {d})"
    try:
        size = len(json.dumps(value, default=str).encode())
    except (TypeError, ValueError, RecursionError) as exc:
        return f"not storable as JSON ({exc})"
    if size > MAX_PARAM_BYTES:
        return f"{size:,} bytes as JSON, more than the {MAX_PARAM_BYTES:,} a param may have"
    return None


def check_param(section: str, key: str, value: Any, field: str) -> None:
    """UsageError naming the param and the record field it came in, when its value is refused."""
    why = problem(value)
    if why:
        raise UsageError(
            f"param {section}/{key} ({field}) is {why}: flatten it into several params, or upload it"
            " with task.upload_artifact"
        )


def shown(value: Any) -> Any:
    """A stored value as pages show it: itself, or a note when it is beyond the bounds (stored
    before they existed), so the page that lists it still answers."""
    if not isinstance(value, dict | list | tuple):
        return value
    why = problem(value)
    return f"(not shown: {why})" if why else value
