"""Collecting problems while reading a file: where, what, and the word the user probably meant.

Readers never stop at the first mistake: each problem is recorded with its position and key path,
and the loader raises one SpecError with all of them in file order.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from enum import StrEnum
from typing import Any, TypeVar

from phalanx import suggest
from phalanx.errors import Problem, SpecError
from phalanx.spec.yamltree import Mark, TreeError, YKey, YMap, YNode, YScalar, YSeq, compose, plain

E = TypeVar("E", bound=StrEnum)

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def did_you_mean(word: str, choices: Iterable[str], fits: Callable[[str], bool] | None = None) -> str:
    """ "; did you mean 'X'?" with the nearest choice by edit distance (phalanx.suggest), or ""."""
    return suggest.did_you_mean(word, choices, fits)


def join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def describe(node: YNode) -> str:
    """What the user wrote, in words, for "expected X, got Y"."""
    if isinstance(node, YMap):
        return "a mapping"
    if isinstance(node, YSeq):
        return "a list"
    v = node.value
    if v is None:
        return "nothing (null)"
    if isinstance(v, bool):
        return f"the boolean {str(v).lower()}"
    if isinstance(v, int | float):
        return f"the number {node.raw.strip() or v}"
    return f"the text {v!r}"


class Collector:
    """Problems and notes found in one file."""

    def __init__(self, filename: str) -> None:
        self.filename = filename
        self.problems: list[Problem] = []
        self.notes: list[Problem] = []

    def _problem(self, at: YNode | YKey | Mark, path: str, message: str) -> Problem:
        mark = at if isinstance(at, Mark) else at.mark
        return Problem(message=message, path=path, file=self.filename, line=mark.line, column=mark.column)

    def add(self, at: YNode | YKey | Mark, path: str, message: str) -> None:
        self.problems.append(self._problem(at, path, message))

    def note(self, at: YNode | YKey | Mark, path: str, message: str) -> None:
        self.notes.append(self._problem(at, path, message))

    def raise_if_any(self) -> None:
        if self.problems:
            raise SpecError(sorted_problems(self.problems))

    def compose(self, text: str) -> YNode | None:
        """The file's tree (None: an empty file), what the YAML itself gets wrong collected here; a
        file that is not YAML at all is a SpecError at once."""
        try:
            root, problems = compose(text, self.filename)
        except TreeError as exc:
            raise SpecError(sorted_problems(exc.problems)) from None
        self.problems.extend(problems)
        return root

    # -- shapes ---------------------------------------------------------------------------------

    def mapping(
        self,
        node: YNode,
        path: str,
        allowed: Iterable[str] | None = None,
        refused: Mapping[str, str] | None = None,
        ignored: Mapping[str, str] | None = None,
        shapes: Mapping[str, type] | None = None,
    ) -> YMap | None:
        """The node as a mapping whose keys are checked against ``allowed`` (None: any key).

        ``refused`` keys get their own explanation instead of "unknown key"; ``ignored`` keys are
        accepted with a note (Polyaxon features that mean nothing here). ``shapes``: what each
        allowed key holds (YScalar, YSeq, YMap), so an unknown key's hint prefers, among equally
        near names, one that takes the value written (`workers: 2` -> n_workers).
        """
        if not isinstance(node, YMap):
            self.add(node, path, f"expected a mapping (key: value lines), got {describe(node)}")
            return None
        if allowed is not None:
            allowed = list(allowed)
            for key, value in node.items:
                sub = join(path, key.name)
                if refused and key.name in refused:
                    self.add(key, sub, refused[key.name])
                elif ignored and key.name in ignored:
                    self.note(key, sub, ignored[key.name])
                elif key.name not in allowed:
                    fits = None
                    if shapes:
                        fits = lambda name, v=value: isinstance(v, shapes.get(name, object))  # noqa: E731
                    hint = did_you_mean(key.name, allowed, fits)
                    self.add(key, sub, f"unknown key{hint} (allowed here: {', '.join(allowed)})")
        return node

    def sequence(self, node: YNode, path: str) -> YSeq | None:
        if not isinstance(node, YSeq):
            self.add(node, path, f"expected a list, got {describe(node)}")
            return None
        return node

    def text(self, node: YNode, path: str, allow_numbers: bool = False) -> str | None:
        if isinstance(node, YScalar) and isinstance(node.value, str):
            return node.value
        if (
            allow_numbers
            and isinstance(node, YScalar)
            and isinstance(node.value, int | float)
            and not isinstance(node.value, bool)
        ):
            return node.raw.strip().strip("'\"") or str(node.value)
        self.add(node, path, f"expected text, got {describe(node)}")
        return None

    def texts(self, node: YNode, path: str) -> tuple[str, ...] | None:
        """A list of text items (numbers are taken as their text: `tags: [v1, 2]`)."""
        seq = self.sequence(node, path)
        if seq is None:
            return None
        out = [self.text(item, join(path, i), allow_numbers=True) for i, item in enumerate(seq.items)]
        return tuple(t for t in out if t is not None) if all(t is not None for t in out) else None

    def integer(self, node: YNode, path: str, minimum: int = 0, what: str = "a whole number") -> int | None:
        v = node.value if isinstance(node, YScalar) else None
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if isinstance(v, bool) or not isinstance(v, int):
            self.add(node, path, f"expected {what}, got {describe(node)}")
            return None
        if v < minimum:
            need = "must not be negative" if minimum == 0 else f"must be at least {minimum}"
            self.add(node, path, f"{need}, got {v}")
            return None
        return v

    def number(self, node: YNode, path: str, positive: bool = True) -> float | None:
        v = node.value if isinstance(node, YScalar) else None
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            self.add(node, path, f"expected a number, got {describe(node)}")
            return None
        if positive and v <= 0:
            self.add(node, path, f"must be more than 0, got {v:g}")
            return None
        return float(v)

    def choice(self, node: YNode, path: str, enum: type[E], what: str) -> E | None:
        v = node.value if isinstance(node, YScalar) else None
        if not isinstance(v, str):
            self.add(node, path, f"expected a {what} name, got {describe(node)}")
            return None
        names = [e.value for e in enum]
        if v not in names:
            hint = did_you_mean(v, names)
            self.add(node, path, f"unknown {what} '{v}'{hint} (expected one of: {', '.join(names)})")
            return None
        return enum(v)

    def str_mapping(self, node: YNode, path: str, env_names: bool = False) -> dict[str, str] | None:
        """name -> text; numbers and booleans are written as text (`true`, `2`)."""
        m = self.mapping(node, path)
        if m is None:
            return None
        out: dict[str, str] = {}
        ok = True
        for key, value in m.items:
            text = self.scalar_text(value, join(path, key.name))
            if env_names and not _ENV_NAME.fullmatch(key.name):
                self.add(key, join(path, key.name), "not a valid environment variable name")
                ok = False
            if text is None:
                ok = False
            else:
                out[key.name] = text
        return out if ok else None

    def scalar_text(self, node: YNode, path: str) -> str | None:
        if not isinstance(node, YScalar) or node.value is None:
            self.add(node, path, f"expected a text value, got {describe(node)}")
            return None
        v = node.value
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, str):
            return v
        return node.raw.strip() or str(v)

    def free(self, node: YNode) -> Any:
        return plain(node)


def sorted_problems(problems: list[Problem]) -> list[Problem]:
    """File order; problems without a position (none, in practice) first."""
    return sorted(problems, key=lambda p: (p.line or 0, p.column or 0))
