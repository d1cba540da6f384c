"""Experiment file -> ExperimentSpec, or one SpecError listing every problem in file order.

Each problem reads `FILE:LINE:COL: key.path: what is wrong`. Files over 1 MiB are refused before
parsing; YAML alias bombs are refused while the document is copied (see ``yamltree``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from phalanx.errors import Problem, SpecError, UsageError
from phalanx.spec.errors import Collector, sorted_problems
from phalanx.spec.model import ExperimentSpec
from phalanx.spec.schema import read_spec
from phalanx.spec.yamltree import TreeError, compose

MAX_FILE_BYTES = 1 << 20  # 1 MiB: a real experiment file is a few KiB
_PARAM_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_LEADING_ZERO = re.compile(r"^[+-]?0[0-9xXoObB_]")


def load_spec(
    path: str | Path, params: Mapping[str, Any] | None = None, extra_params: bool = False
) -> ExperimentSpec:
    """Read and validate an experiment file.

    ``params`` are `--param name=value` overrides: they fill `{{ name }}` placeholders (even ones
    the file does not declare) and take precedence over the file's params in the returned spec; one
    that does neither is refused unless ``extra_params`` (then it is recorded only).
    Raises SpecError (exit status 2) for a missing, unreadable or invalid file.
    """
    p = Path(path)
    name = str(path)
    try:
        if p.is_dir():
            raise SpecError(
                Problem(
                    f"{name} is a directory; give the experiment file inside it (-f DIR/polyaxonfile.yml)"
                )
            )
        with p.open("rb") as fh:
            data = fh.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise SpecError(Problem(f"{name}: no such file")) from None
    except PermissionError:
        raise SpecError(Problem(f"{name}: permission denied")) from None
    except OSError as exc:
        raise SpecError(Problem(f"{name}: cannot read it ({exc.strerror or exc})")) from None
    if len(data) > MAX_FILE_BYTES:
        raise SpecError(
            Problem(f"{name}: the file is larger than 1 MiB; an experiment file is a few KiB, refused")
        )
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise SpecError(Problem("the file is not UTF-8 text", file=name, line=line, column=column)) from None
    spec = load_spec_text(text, name, params=params, extra_params=extra_params)
    return _with_source(spec, str(p.resolve()))


def load_spec_text(
    text: str, filename: str = "<text>", params: Mapping[str, Any] | None = None, extra_params: bool = False
) -> ExperimentSpec:
    """Validate experiment-file text; ``filename`` is only used in messages."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_FILE_BYTES:
        raise SpecError(Problem(f"{filename}: larger than 1 MiB; an experiment file is a few KiB, refused"))
    c = Collector(filename)
    try:
        root, problems = compose(text, filename)
    except TreeError as exc:
        raise SpecError(sorted_problems(exc.problems)) from None
    c.problems.extend(problems)
    spec = read_spec(c, root, dict(params or {}), extra_params=extra_params)
    c.raise_if_any()
    assert spec is not None  # read_spec returns None only with problems recorded
    spec = replace(spec, launch_params=dict(params or {}))
    return _with_text(spec, text, tuple(str(n) for n in sorted_problems(c.notes)))


def _with_text(spec: ExperimentSpec, text: str, notes: tuple[str, ...]) -> ExperimentSpec:
    return replace(spec, source_text=text, notes=notes)


def _with_source(spec: ExperimentSpec, source: str) -> ExperimentSpec:
    return replace(spec, source_file=source)


def parse_param_overrides(items: Iterable[str]) -> dict[str, Any]:
    """`--param name=value` arguments -> {name: value}; values read as YAML scalars.

    `lr=0.1` gives 0.1, `flag=true` gives True, `name=abc` gives "abc", `x=` gives "". A list or
    mapping must be written as JSON (`layers=[64, 32]`, `opt={"lr": 0.1}`); YAML's flow forms
    (`{lr: 0.1}`) are refused, since what the command receives would differ from what was typed. Text
    that YAML cannot read (`'unclosed`, `a: b`) is kept as given. A later argument for the same
    name wins. Raises UsageError naming the bad argument.
    """
    out: dict[str, Any] = {}
    for item in items:
        name, sep, raw = item.partition("=")
        name = name.strip()
        if not sep:
            raise UsageError(f"--param {item!r}: expected NAME=VALUE, e.g. --param lr=0.01")
        if not _PARAM_NAME.match(name):
            raise UsageError(
                f"--param {item!r}: {name!r} is not a parameter name"
                " (letters, digits and _, not starting with a digit)"
            )
        out[name] = _scalar(raw, item)
    return out


def _scalar(raw: str, item: str = "") -> Any:
    if raw.strip() == "":
        return raw
    if raw.lstrip().startswith(("[", "{")):
        try:
            return json.loads(raw)
        except ValueError:
            raise UsageError(
                f"--param {item!r}: a list or mapping must be JSON, e.g. --param 'layers=[64, 32]' or"
                """ --param 'opt={"lr": 0.1}' (quote it for the shell); for text, write it as a JSON"""
                " string"
            ) from None
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError:
        return raw
    if isinstance(value, int) and not isinstance(value, bool) and _LEADING_ZERO.match(raw.strip()):
        return raw  # `0123` or `0x1f` stay text: ids more often than YAML 1.1 octal numbers
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    return raw  # lists, mappings, dates: the text as given
