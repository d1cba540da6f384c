"""Experiment file -> ExperimentSpec, or one SpecError listing every problem in file order.

Each problem reads `FILE:LINE:COL: key.path: what is wrong`. Files over 1 MiB are refused before
parsing; YAML alias bombs are refused while the document is copied (see ``yamltree``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from phalanx.errors import Problem, SpecError
from phalanx.spec.errors import Collector, sorted_problems
from phalanx.spec.model import ExperimentSpec
from phalanx.spec.params import parse_param_overrides
from phalanx.spec.schema import read_spec

MAX_FILE_BYTES = 1 << 20  # 1 MiB: a real experiment file is a few KiB


def load_spec(
    path: str | Path, params: Mapping[str, Any] | None = None, extra_params: bool = False
) -> ExperimentSpec:
    """Read and validate an experiment file.

    ``params`` are `--param name=value` overrides: they fill `{{ name }}` placeholders (even ones
    the file does not declare) and take precedence over the file's params in the returned spec; one
    that does neither is refused unless ``extra_params`` (then it is recorded only).
    Raises SpecError (exit status 2) for a missing, unreadable or invalid file.
    """
    text = read_file_text(path)
    spec = load_spec_text(text, str(path), params=params, extra_params=extra_params)
    return _with_source(spec, str(Path(path).resolve()))


def read_file_text(path: str | Path) -> str:
    """The text of an experiment (or service) file; SpecError (exit status 2) for a missing,
    unreadable, oversized or non-UTF-8 one."""
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
    return text


def load_spec_text(
    text: str, filename: str = "<text>", params: Mapping[str, Any] | None = None, extra_params: bool = False
) -> ExperimentSpec:
    """Validate experiment-file text; ``filename`` is only used in messages."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_FILE_BYTES:
        raise SpecError(Problem(f"{filename}: larger than 1 MiB; an experiment file is a few KiB, refused"))
    c = Collector(filename)
    root = c.compose(text)
    spec = read_spec(c, root, dict(params or {}), extra_params=extra_params)
    c.raise_if_any()
    assert spec is not None  # read_spec returns None only with problems recorded
    spec = replace(spec, launch_params=dict(params or {}))
    return _with_text(spec, text, tuple(str(n) for n in sorted_problems(c.notes)))


def _with_text(spec: ExperimentSpec, text: str, notes: tuple[str, ...]) -> ExperimentSpec:
    return replace(spec, source_text=text, notes=notes)


def _with_source(spec: ExperimentSpec, source: str) -> ExperimentSpec:
    return replace(spec, source_file=source)


def refusal_text(exc: SpecError, file: str | Path, kind: str = "experiment file") -> str:
    """How `phalanx run`, `check` and `group run` report a file they refused (exit status 2): one
    located line per problem and a last line counting them, or the one `error: ...` line for a file
    that could not be read (missing, a directory, too large). ``kind``: what the file should have
    been ("experiment file", "group file")."""
    if len(exc.problems) == 1 and exc.problems[0].line is None:
        return f"error: {exc.problems[0]}"
    n = len(exc.problems)
    lines = [str(problem) for problem in exc.problems]
    lines.append(f"error: {file} is not a valid {kind} ({n} problem{'s' * (n != 1)})")
    return "\n".join(lines)


__all__ = [
    "MAX_FILE_BYTES",
    "load_spec",
    "load_spec_text",
    "parse_param_overrides",
    "read_file_text",
    "refusal_text",
]
