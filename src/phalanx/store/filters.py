"""The run table's filter grammar, one parser for every place a user types a filter: the web UI's
filter box, the API's ``where=`` (repeated, or one ``and``-joined text) and ``phalanx ls --where``.

    FILTER    := CONDITION ( "and" CONDITION )*
    CONDITION := COLUMN OP VALUE
    OP        := "=" | "!=" | "<" | "<=" | ">" | ">="
    COLUMN    := param:KEY | param:SECTION/KEY | metric:AGG:TITLE   (see ``store.columns``)
    VALUE     := a number, a bare word, or text in single or double quotes (which may hold " and ")

``and`` is a separator only as a whole word between spaces, in any case (``AND``); a value that
must contain `` and `` is quoted. A value that reads as a number compares as a number. Pure Python,
no SQL: the server filters the column values the store read.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from typing import Any

from phalanx.errors import UsageError
from phalanx.store.columns import parse_column

OPS = ("<=", ">=", "!=", "=", "<", ">")
_OP = re.compile(r"<=|>=|!=|=|<|>")
# a quoted string, or one character; "and" between whitespace splits, outside quotes only
_TOKEN = re.compile(r"\"[^\"]*\"|'[^']*'|(?:^|\s+)and(?:\s+|$)|.", re.IGNORECASE | re.DOTALL)
EXAMPLE = "param:optimizer=adam and metric:max:val/acc>=0.9"


@dataclass(frozen=True)
class Condition:
    column: str
    op: str
    value: float | str

    def matches(self, value: Any) -> bool:
        """Whether a row whose column holds ``value`` (None: the row has none) passes."""
        return matches(value, self.op, self.value)


def parse_filter(text: str) -> list[Condition]:
    """Every condition of an ``and``-joined filter, in order; UsageError naming the one it cannot
    read (its number and text) and the form it expects. An empty text is no condition."""
    parts = split_and(text)
    if len(parts) == 1 and not parts[0].strip():
        return []
    out = []
    for i, part in enumerate(parts, start=1):
        where = f"condition {i} of {len(parts)} ({part.strip()!r})" if len(parts) > 1 else repr(part.strip())
        if not part.strip():
            raise UsageError(f"filter {text.strip()!r}: condition {i} is empty; write e.g. {EXAMPLE}")
        try:
            out.append(parse_condition(part))
        except UsageError as err:
            raise UsageError(f"filter {where}: {err}") from None
    return out


def parse_filters(texts: list[str]) -> list[Condition]:
    """Repeated ``where=`` values, each itself a filter: all of their conditions hold."""
    return [c for t in texts for c in parse_filter(t)]


def split_and(text: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    for token in _TOKEN.findall(text):
        if len(token) > 1 and token.strip().lower() == "and" and token[0] not in "'\"":
            parts.append("".join(current))
            current = []
        else:
            current.append(token)
    parts.append("".join(current))
    return parts


def parse_condition(text: str) -> Condition:
    """``COLUMN OP VALUE`` -> a Condition (the value a number when it reads as one)."""
    found = _OP.search(text)
    column = text[: found.start()].strip() if found else ""
    if not found or not column:
        raise UsageError(f"write COLUMN OP VALUE (OP one of {' '.join(OPS)}), e.g. {EXAMPLE}")
    parse_column(column)
    raw = text[found.end() :].strip()
    if not raw:
        raise UsageError(f"no value after {found.group()!r}: write e.g. {column}{found.group()}0.01")
    value: float | str = raw
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "'\"":
        value = raw[1:-1]  # quoted: text, even when it looks like a number
    else:
        with contextlib.suppress(ValueError):
            value = float(raw)
    return Condition(column, found.group(), value)


def matches(value: Any, op: str, wanted: Any) -> bool:
    if value is None:
        return op == "!="
    if isinstance(wanted, float):
        try:
            number = float(value)
        except (TypeError, ValueError):
            return op == "!="
        left: Any = number
    else:
        left = str(value)
    return bool(
        {
            "=": left == wanted,
            "!=": left != wanted,
            "<": left < wanted,
            "<=": left <= wanted,
            ">": left > wanted,
            ">=": left >= wanted,
        }[op]
    )
