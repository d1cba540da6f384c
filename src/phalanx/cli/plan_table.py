"""A plan as a table: what `phalanx check FILE` and `phalanx group check FILE` print. A module of its
own so that neither command imports the other for it."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from phalanx.domain import Range
    from phalanx.plan import Plan


def _pair(r: Range, unit: str = "") -> str:
    def one(v: float | None) -> str:
        if v is None:
            return "-"
        return str(int(v)) if float(v).is_integer() else f"{v:g}"

    if r.requests is None and r.limits is None:
        return "-"
    return f"{one(r.requests)} / {one(r.limits)}{unit}"


def print_plan_table(plan: Plan) -> None:
    """The plan's replicas as a table (role, rank, resources, node selector), then its command."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from phalanx.domain import Framework, Role, plural

    native = {
        Framework.MXNET: {Role.MASTER: "scheduler", Role.PS: "server"},
    }.get(plan.framework or Framework.PYTORCH, {})
    console = Console(highlight=False, soft_wrap=False, width=max(120, Console().width))
    counts = plan.topology()
    console.print(
        f"framework: {plan.framework or '-'}   backend: {plan.backend or 'native'}   "
        f"replicas: {counts['master']} master, {plural(counts['worker'], 'worker')}, {counts['ps']} ps"
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
