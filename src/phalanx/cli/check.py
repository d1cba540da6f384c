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

from phalanx.cli.app import app, choice_option
from phalanx.cli.listing import emit_json
from phalanx.cli.plan_table import print_plan_table

if TYPE_CHECKING:
    pass


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
        Output, choice_option(Output, "-o", "--output", help="table (for people) or json (for scripts).")
    ] = Output.TABLE,
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

    replicas = [(r.name, r.resources, r.processes) for r in plan.replicas]
    for size in limits.size_notes(replicas, limits.machine()):
        sys.stderr.write(f"note: {size}\n")
    if output is Output.JSON:
        doc = plan.to_json()
        doc["topology"] = plan.topology()
        doc["world_size"] = plan.world_size
        emit_json(doc)
    else:
        print_plan_table(plan)
