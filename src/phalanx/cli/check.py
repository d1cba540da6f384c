"""`phalanx check`: validate an experiment file and show the replicas it expands to.

Nothing is started or written. Problems go to stderr as `FILE:LINE:COL: key.path: what is wrong`
with exit status 2; `-o json` prints exactly one JSON document on stdout.
"""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from phalanx.cli.app import app, emit_json

if TYPE_CHECKING:
    from phalanx.domain import Range
    from phalanx.plan import Plan


class Output(StrEnum):
    TABLE = "table"
    JSON = "json"


@app.command("check")
def check(
    file: Annotated[
        Path,
        typer.Option("-f", "--file", metavar="FILE", help="The experiment file (polyaxonfile) to check."),
    ],
    param: Annotated[
        list[str] | None,
        typer.Option(
            "--param",
            metavar="NAME=VALUE",
            help="Override or add a param: NAME=VALUE (repeatable); fills {{ NAME }}.",
        ),
    ] = None,
    output: Annotated[
        Output, typer.Option("-o", "--output", help="table (for people) or json (for scripts).")
    ] = (Output.TABLE),
    allow_unused: Annotated[
        bool,
        typer.Option(
            "--allow-unused",
            help="Group files: a matrix name that looks like a placeholder typo is a note, not an error.",
        ),
    ] = False,
    extra_params: Annotated[
        bool,
        typer.Option(
            "--extra-params",
            help="Accept --param names the file neither declares nor uses (refused without this flag).",
        ),
    ] = False,
) -> None:
    """Validate an experiment file and print its topology: every replica with its rank and resources."""
    from phalanx.errors import SpecError, UsageError
    from phalanx.plan import build_plan
    from phalanx.spec.loader import load_spec, parse_param_overrides, refusal_text

    if str(file) == "-":
        raise UsageError(
            "-f -: the experiment file cannot come from stdin; save it to a file and pass its path"
        )
    overrides = parse_param_overrides(param or [])
    from phalanx.spec.group import is_group_file

    if is_group_file(file):
        from phalanx.cli.group import check_group

        check_group(file, overrides, output is Output.JSON, allow_unused, extra_params)
        return
    try:
        spec = load_spec(file, params=overrides, extra_params=extra_params)
        plan = build_plan(spec)
    except SpecError as exc:
        sys.stderr.write(refusal_text(exc, file) + "\n")
        raise typer.Exit(2) from None
    for note in (*spec.notes, *plan.notes):
        sys.stderr.write(f"note: {note}\n")
    from phalanx.machine import limits

    size = limits.size_note([(r.name, r.resources, r.processes) for r in plan.replicas], limits.machine())
    if size:
        sys.stderr.write(f"note: {size}\n")
    if output is Output.JSON:
        doc = plan.to_json()
        doc["topology"] = plan.topology()
        doc["world_size"] = plan.world_size
        emit_json(doc)
    else:
        _print_table(plan)


def _pair(r: Range, unit: str = "") -> str:
    def one(v: float | None) -> str:
        if v is None:
            return "-"
        return str(int(v)) if float(v).is_integer() else f"{v:g}"

    if r.requests is None and r.limits is None:
        return "-"
    return f"{one(r.requests)} / {one(r.limits)}{unit}"


def _print_table(plan: Plan) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from phalanx.domain import Framework, Role

    native = {
        Framework.MXNET: {Role.MASTER: "scheduler", Role.PS: "server"},
    }.get(plan.framework or Framework.PYTORCH, {})
    console = Console(highlight=False, soft_wrap=False, width=max(120, Console().width))
    counts = plan.topology()
    console.print(
        f"framework: {plan.framework or '-'}   backend: {plan.backend or 'native'}   "
        f"replicas: {counts['master']} master, {counts['worker']} workers, {counts['ps']} ps"
    )
    table = Table(show_edge=False, pad_edge=False)
    many = any(r.processes > 1 for r in plan.replicas)
    columns = ["replica", "role", "index", "rank", "cpu", "memory (MiB)", "gpu", "node selector"]
    if many:
        columns.insert(4, "processes")
    for name in columns:
        table.add_column(name, no_wrap=name != "node selector")
    for r in plan.replicas:
        role = str(r.role) + (f" ({native[r.role]})" if r.role in native else "")
        selector = ", ".join(f"{k}={v}" for k, v in r.node_selector.items()) or "-"
        row = [r.name, role, str(r.index), "-" if r.rank is None else str(r.rank)]
        if many:
            row.append(str(r.processes))
        row += [_pair(r.resources.cpu), _pair(r.resources.memory), _pair(r.resources.gpu), selector]
        table.add_row(*(Text(cell) for cell in row))  # Text: a `[` in a value is not rich markup
    console.print(table)
    console.print(f"command: {plan.command}", markup=False)
