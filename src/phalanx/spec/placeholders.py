"""The placeholders of an experiment file's ``run.cmd`` (``{{ name }}``): each names a param (or an
input), is closed, and an empty one standing alone is noted; a ``--param`` names a param the file
declares or uses. Problems are located at the placeholder itself where it is written verbatim."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from phalanx.errors import Problem
from phalanx.spec.errors import Collector, did_you_mean
from phalanx.spec.shellwords import stands_alone
from phalanx.spec.yamltree import Mark, YMap, YScalar

PLACEHOLDER = re.compile(r"\{\{(.*?)\}\}", re.S)
_NAME = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(\|\s*raw\s*)?$")  # `| raw`: not shell-quoted
_INPUT_REF = re.compile(r"^\s*inputs\.([A-Za-z_][A-Za-z0-9_-]*)\s*$")  # {{ inputs.NAME }}


def check_placeholders(
    c: Collector,
    root: YMap,
    command: list[tuple[str, YScalar]],
    known: Mapping[str, Any],
    inputs: set[str] | frozenset[str] = frozenset(),
) -> None:
    for text, node in command:
        spans = [m.span() for m in PLACEHOLDER.finditer(text)]
        opened = (i for i in range(len(text)) if text.startswith("{{", i))
        unclosed = next((i for i in opened if not any(a <= i < b for a, b in spans)), None)
        if unclosed is not None:  # Polyaxon's Jinja refused it too; filled as is, its param went unused
            rest = text[unclosed:].split("\n")[0][:40]
            mark, _ = placeholder_mark(node, rest, unclosed)
            c.add(mark, "run.cmd", f"placeholder {rest!r} is never closed: write {{{{ name }}}}")
        start = 0
        for match in PLACEHOLDER.finditer(text):
            mark, start = placeholder_mark(node, match.group(0), start)
            name = _NAME.match(match.group(1))
            path = "run.cmd"
            data = _INPUT_REF.match(match.group(1))
            if data is not None:
                if data.group(1) not in inputs:
                    listed = ", ".join(sorted(inputs)) or "none"
                    c.add(
                        mark,
                        path,
                        f"{match.group(0)!r} names no input (inputs: {listed}); add it under inputs:",
                    )
            elif name is None:
                c.add(
                    mark,
                    path,
                    f"unsupported placeholder {match.group(0)!r}:"
                    " only {{ name }} with a name from params is filled",
                )
            elif name.group(1) not in known:
                n = name.group(1)
                hint = did_you_mean(n, known)
                listed = f" (params: {', '.join(sorted(known))})" if known else ""
                c.add(
                    mark,
                    path,
                    f"unknown placeholder {{{{ {n} }}}}: not in params{hint}{listed}; "
                    f"declare it under params: or pass --param {n}=VALUE",
                )


def note_empty_params(c: Collector, command: list[tuple[str, YScalar]], values: Mapping[str, Any]) -> None:
    """A note for each `{{ name }}` standing alone whose value is empty: it renders as nothing (no
    argument, as Polyaxon 0.x did; spec.shellwords.stands_alone says why), which `phalanx check` says."""
    for text, node in command:
        start = 0
        for match in PLACEHOLDER.finditer(text):
            mark, start = placeholder_mark(node, match.group(0), start)
            name = _NAME.match(match.group(1))
            if name is None or name.group(2) or values.get(name.group(1), None) != "":
                continue
            if stands_alone(text, match.start(), match.end()):
                n = name.group(1)
                c.note(
                    mark,
                    "run.cmd",
                    f"{{{{ {n} }}}} is empty, so it adds no argument to the command (as in Polyaxon 0.x);"
                    f' write "{{{{ {n} }}}}" (in quotes) to pass an empty argument',
                )


def check_overrides(
    c: Collector,
    command: list[tuple[str, YScalar]],
    declared: Mapping[str, Any],
    overrides: Mapping[str, Any],
) -> None:
    used = {
        m.group(1)
        for text, _ in command
        for p in PLACEHOLDER.finditer(text)
        if (m := _NAME.match(p.group(1)))
    }
    for name in overrides:
        if name in declared or name in used:
            continue
        choices = sorted(set(declared) | used)
        hint = did_you_mean(name, choices)
        listed = f" (it has: {', '.join(choices)})" if choices else ""
        c.problems.append(
            Problem(
                f"the file neither declares a param {name!r} nor uses {{{{ {name} }}}} in run.cmd"
                f"{listed}{hint}; fix the name, or pass --extra-params to record it anyway",
                path=f"--param {name}",
            )
        )


def placeholder_mark(node: YScalar, placeholder: str, start: int) -> tuple[Mark, int]:
    """The placeholder's own line and column when it is written verbatim in the source, and where
    to look for the next one."""
    offset = node.raw.find(placeholder, start)
    if offset < 0:
        return node.mark, start
    before = node.raw[:offset]
    end = offset + len(placeholder)
    if "\n" not in before:
        return Mark(node.mark.line, node.mark.column + offset), end
    return Mark(node.mark.line + before.count("\n"), offset - before.rfind("\n")), end
