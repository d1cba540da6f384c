"""The run table's filter grammar, one parser for every place a user types a filter: the web UI's
filter box, the API's ``where=`` (repeated: all must hold), ``phalanx ls --where`` and
``phalanx.search_experiments``. What it cannot read is refused with the position and what was
expected there (``FilterError``: 400 / exit status 2), never read as something else.

    FILTER    := OR | (nothing)
    OR        := AND ( "or" AND )*
    AND       := TERM ( "and" TERM )*
    TERM      := "(" OR ")" | CONDITION
    CONDITION := COLUMN OP VALUE | COLUMN ["not"] "in" "(" VALUE ( "," VALUE )* ")"
    OP        := "=" | "==" | "!=" | "<" | "<=" | ">" | ">="
    COLUMN    := param:KEY | param:SECTION/KEY | metric:AGG:TITLE[@rankN]   (``store.columns``;
                 quoted when it holds a space)
    VALUE     := a number | a word | 'text' | "text"

Keywords (``and``, ``or``, ``in``, ``not``) in any case; ``and`` binds tighter than ``or``. A word
is anything but spaces, quotes, parentheses, commas and ``= ! < >``; quote a value holding those or
a keyword.

What a comparison means, typed by the column (``Filter.select``):

* a number against a number compares numbers; a number against a text cell compares numbers when
  the text reads as one, else text (``007`` matches the text ``007``); text against text compares
  text (booleans read ``true``/``false``); text never matches a number cell;
* a metric column holds numbers: text after it is refused (at parse time); a param column whose
  values are numbers in every experiment considered refuses text the same way;
* an experiment without the value matches only ``!=`` and ``not in``;
* a column no experiment considered has is refused, with the nearest known names as a hint.

Why a hand-written recursive-descent parser and not a parser library (lark): the grammar is the
few rules above, the columns are words a lexer generator would need the same hand-made regular
expression for, and the messages (position, what was expected, a hint) are the point; a library's
errors would be translated back here anyway, and `phalanx ls` would pay for building its tables at
every start. Pure Python, no SQL: the store reads the column values, this module filters them.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from phalanx.errors import UsageError
from phalanx.store.columns import parse_column, split_rank

EXAMPLE = "param:optimizer=adam and (param:lr<0.001 or metric:max:val/acc>=0.9)"
OPS = ("=", "==", "!=", "<", "<=", ">", ">=")
KEYWORDS = ("and", "or", "in", "not")
NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_TOKEN = re.compile(
    r"""(?P<space>\s+)|(?P<punct>[(),])|(?P<op><=|>=|!=|==|=|<|>)|(?P<quoted>'[^']*'|"[^"]*")"""
    r"""|(?P<word>[^\s()<>=!,'"]+)"""
)
VALUE_WORDS = "a value (a number, a word or 'quoted text')"


class FilterError(UsageError):
    """A filter that cannot be read, or compared as written: ``position`` is the 1-based character
    of ``text`` where it went wrong."""

    def __init__(self, text: str, position: int, message: str) -> None:
        self.text = text
        self.position = position
        super().__init__(f"filter {text!r}, position {position}: {message}")


@dataclass(frozen=True)
class Token:
    kind: str  # "punct", "op", "quoted", "word", "end"
    text: str  # as written (a quoted one with its quotes)
    position: int  # 1-based

    def keyword(self) -> str | None:
        low = self.text.lower()
        return low if self.kind == "word" and low in KEYWORDS else None

    def shown(self) -> str:
        return "the end of the filter" if self.kind == "end" else repr(self.text)


@dataclass(frozen=True)
class Literal:
    """A value as typed: its text (quotes removed) and, unless quoted or not a number, its number."""

    text: str
    number: float | None
    position: int


@dataclass(frozen=True)
class Condition:
    column: str
    op: str  # one of OPS (== read as =), "in" or "not in"
    values: tuple[Literal, ...]
    position: int  # where the column starts
    source: str = field(default="", compare=False)  # the filter text it came from (messages)

    def matches(self, cell: Any) -> bool:
        """Whether a row whose column holds ``cell`` (None: the row has none) passes."""
        if self.op in ("in", "not in"):
            found = any(compare(cell, "=", v) for v in self.values)
            return found if self.op == "in" else not found
        return compare(cell, self.op, self.values[0])


@dataclass(frozen=True)
class AnyOf:
    parts: tuple[Node, ...]


@dataclass(frozen=True)
class AllOf:
    parts: tuple[Node, ...]


Node = Condition | AnyOf | AllOf


@dataclass(frozen=True)
class Filter:
    """A parsed filter (``root`` None: no condition, every row passes)."""

    root: Node | None = None

    def conditions(self) -> list[Condition]:
        return list(_walk(self.root)) if self.root is not None else []

    def columns(self) -> list[str]:
        return list(dict.fromkeys(c.column for c in self.conditions()))

    def matches(self, row: Mapping[str, Any]) -> bool:
        """Whether a row (column -> value; absent: none) passes."""
        return self.root is None or _holds(self.root, row)

    def select(
        self,
        ids: Sequence[str],
        values: Mapping[str, Mapping[str, Any]],
        known: Callable[[], Mapping[str, Sequence[str]]] = dict,
    ) -> list[str]:
        """The ids (in order) whose rows pass, after checking each condition against the column's
        values among ``ids``: FilterError for a column that no experiment has (none of ``ids``,
        nor any in ``known()``, the store's ``column_names``: {"params": keys, "metrics": titles},
        whose nearest names are the hint) or text compared with a param that is a number in every
        one of ``ids``."""
        if self.root is None:
            return list(ids)
        for c in self.conditions():
            _check_column(c, ids, values, known)
        return [i for i in ids if _holds(self.root, values.get(i, {}))]


def parse_filter(text: str) -> Filter:
    """The filter a user typed; FilterError naming the position and what was expected there."""
    parser = _Parser(text)
    return Filter(parser.parse())


def parse_filters(texts: Sequence[str]) -> Filter:
    """Repeated ``where=`` values, each a filter: all of them hold."""
    roots = [root for text in texts if (root := parse_filter(text).root) is not None]
    if not roots:
        return Filter()
    return Filter(roots[0] if len(roots) == 1 else AllOf(tuple(roots)))


# --- reading ----------------------------------------------------------------------------------


def tokens(text: str) -> list[Token]:
    out: list[Token] = []
    i = 0
    while i < len(text):
        found = _TOKEN.match(text, i)
        if found is None:
            char = text[i]
            if char in "'\"":
                raise FilterError(text, i + 1, f"the quote {char} opened here is never closed")
            raise FilterError(text, i + 1, f"{char!r} is not part of the grammar; {_OPS_WORDS}")
        kind = found.lastgroup or ""
        if kind != "space":
            out.append(Token(kind, found.group(), i + 1))
        i = found.end()
    out.append(Token("end", "", len(text) + 1))
    return out


_JOINER_HINTS = {
    "&&": " (write and)",
    "&": " (write and)",
    "||": " (write or)",
    "|": " (write or)",
    ",": " (join conditions with and / or)",
}
_OPS_WORDS = "compare with = != < <= > >= or in (...), join with and / or"


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = tokens(text)
        self.at = 0

    def parse(self) -> Node | None:
        if self.peek().kind == "end":
            return None
        node = self.any_of()
        end = self.peek()
        if end.kind != "end":
            self.fail(end, f"expected 'and', 'or' or the end of the filter{_JOINER_HINTS.get(end.text, '')}")
        return node

    def peek(self) -> Token:
        return self.tokens[self.at]

    def take(self) -> Token:
        token = self.tokens[self.at]
        self.at += 1
        return token

    def fail(self, token: Token, expected: str) -> None:
        raise FilterError(self.text, token.position, f"{expected}, found {token.shown()}")

    def any_of(self) -> Node:
        parts = [self.all_of()]
        while self.peek().keyword() == "or":
            self.take()
            parts.append(self.all_of())
        return parts[0] if len(parts) == 1 else AnyOf(tuple(parts))

    def all_of(self) -> Node:
        parts = [self.term()]
        while self.peek().keyword() == "and":
            self.take()
            parts.append(self.term())
        return parts[0] if len(parts) == 1 else AllOf(tuple(parts))

    def term(self) -> Node:
        token = self.peek()
        if token.kind == "punct" and token.text == "(":
            self.take()
            inner = self.any_of()
            close = self.peek()
            if close.kind != "punct" or close.text != ")":
                self.fail(close, "expected ')' closing the '(' at position " + str(token.position))
            self.take()
            return inner
        return self.condition()

    def condition(self) -> Condition:
        token = self.take()
        if token.kind not in ("word", "quoted") or token.keyword():
            self.fail(token, f"expected a column (param:KEY or metric:AGG:TITLE), e.g. {EXAMPLE}")
        column = _unquote(token.text) if token.kind == "quoted" else token.text
        try:
            kind = parse_column(column)[0]
        except UsageError as err:
            bare = "" if ":" in column else f"; did you mean param:{column} or metric:last:{column}?"
            raise FilterError(self.text, token.position, f"{err}{bare}") from None
        op = self.take()
        if op.kind == "op":
            value = self.value(op)
            self.typed(kind, column, value)
            return Condition(column, "=" if op.text == "==" else op.text, (value,), token.position, self.text)
        negated = op.keyword() == "not"
        if negated:
            op = self.take()
        if op.keyword() != "in":
            expected = "'in'" if negated else "an operator (= != < <= > >=) or 'in'"
            self.fail(op, f"expected {expected} after {column}")
        values = self.listed(op)
        for v in values:
            self.typed(kind, column, v)
        return Condition(column, "not in" if negated else "in", values, token.position, self.text)

    def value(self, after: Token) -> Literal:
        token = self.take()
        if token.kind == "quoted":
            return Literal(_unquote(token.text), None, token.position)
        if token.kind != "word" or token.keyword():
            quoted = " (quote a keyword used as a value)" if token.keyword() else ""
            self.fail(token, f"expected {VALUE_WORDS} after {after.text!r}{quoted}")
        return Literal(token.text, _number(token.text), token.position)

    def listed(self, after: Token) -> tuple[Literal, ...]:
        opening = self.take()
        if opening.kind != "punct" or opening.text != "(":
            self.fail(opening, "expected '(' after 'in', e.g. param:optimizer in (adam, sgd)")
        values = [self.value(opening)]
        while True:
            sep = self.take()
            if sep.kind == "punct" and sep.text == ")":
                return tuple(values)
            if sep.kind != "punct" or sep.text != ",":
                self.fail(sep, f"expected ',' or ')' in the list opened at position {opening.position}")
            values.append(self.value(sep))

    def typed(self, kind: str, column: str, value: Literal) -> None:
        if kind == "metric" and value.number is None:
            raise FilterError(
                self.text, value.position, f"{column} is a number; {value.text!r} is text: write a number"
            )


def _unquote(text: str) -> str:
    return text[1:-1]


def _number(word: str) -> float | None:
    return float(word) if NUMBER.fullmatch(word) else None


def _walk(node: Node | None) -> Iterator[Condition]:
    if isinstance(node, Condition):
        yield node
    elif node is not None:
        for part in node.parts:
            yield from _walk(part)


# --- evaluating --------------------------------------------------------------------------------


def _holds(node: Node, row: Mapping[str, Any]) -> bool:
    if isinstance(node, Condition):
        return node.matches(row.get(node.column))
    if isinstance(node, AnyOf):
        return any(_holds(p, row) for p in node.parts)
    return all(_holds(p, row) for p in node.parts)


def cell_number(cell: Any) -> float | None:
    """A cell that is a number (not a boolean), as a float; None otherwise."""
    if isinstance(cell, bool) or not isinstance(cell, int | float):
        return None
    return float(cell)


def cell_text(cell: Any) -> str:
    if isinstance(cell, bool):
        return "true" if cell else "false"
    if isinstance(cell, str):
        return cell
    if isinstance(cell, dict | list):
        return json.dumps(cell, sort_keys=True)
    return str(cell)


def compare(cell: Any, op: str, value: Literal) -> bool:
    """One comparison, as the module's docstring says (``op`` one of OPS but ==)."""
    if cell is None or (isinstance(cell, float) and math.isnan(cell)):
        return op == "!="
    number = cell_number(cell)
    if number is None and value.number is not None and isinstance(cell, str) and NUMBER.fullmatch(cell):
        number = float(cell)
    if number is not None and value.number is not None:
        return _order(number, op, value.number)
    if cell_number(cell) is not None:  # text against a number cell
        return op == "!="
    return _order(cell_text(cell), op, value.text)


def _order(left: Any, op: str, right: Any) -> bool:
    if op == "=":
        return bool(left == right)
    if op == "!=":
        return bool(left != right)
    if op == "<":
        return bool(left < right)
    if op == "<=":
        return bool(left <= right)
    if op == ">":
        return bool(left > right)
    return bool(left >= right)


def _check_column(
    c: Condition,
    ids: Sequence[str],
    values: Mapping[str, Mapping[str, Any]],
    known: Callable[[], Mapping[str, Sequence[str]]],
) -> None:
    present = [values[i][c.column] for i in ids if c.column in values.get(i, {})]
    if ids and not present:
        names = known()
        kind, key, agg = parse_column(c.column)
        if kind == "param":
            keys = set(names.get("params", ()))
            if key in keys or key.rsplit("/", 1)[-1] in keys:
                return  # some experiment has it, none of these: no match, not a mistake
            everything = [f"param:{k}" for k in keys]
        else:
            if split_rank(key)[0] in set(names.get("metrics", ())):
                return
            everything = [f"metric:{agg}:{t}" for t in names.get("metrics", ())]
        close = difflib.get_close_matches(c.column, everything, n=3, cutoff=0.6)
        hint = f"; did you mean {' or '.join(close)}?" if close else "; GET /api/v1/columns lists the names"
        raise FilterError(c.source, c.position, f"no experiment has {c.column}{hint}")
    if c.column.startswith("param:") and present and all(cell_number(v) is not None for v in present):
        for v in c.values:
            if v.number is None:
                raise FilterError(
                    c.source, v.position, f"{c.column} is a number in every experiment; {v.text!r} is text"
                )
