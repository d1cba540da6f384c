"""What the catalog says about a dataset's versions beyond the versions themselves: which of them
exist, in a few words (``versions_text``), and how many experiments read some of them (``readers``:
their plans' lineage records, ``plan["inputs"]``), which `phalanx data rm` says before it forgets
them: those experiments' reruns will no longer find the version they read."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import String, cast, or_, select

from phalanx.store.sql.models import ExperimentRow

if TYPE_CHECKING:
    from phalanx.store.base import LocalStore


def versions_text(versions: Iterable[int]) -> str:
    """``1, 3`` or ``1-5, 7, 9-12``: the version numbers that exist, a run of three or more as a span
    (a gap is never hidden behind one)."""
    numbers = sorted(set(versions))
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][-1] + 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    parts: list[str] = []
    for run in runs:
        parts.extend([f"{run[0]}-{run[-1]}"] if len(run) >= 3 else map(str, run))
    return ", ".join(parts)


def readers(
    store: LocalStore, name: str, versions: Iterable[int], projects: Sequence[str] | None = None
) -> int:
    """How many experiments read one of ``name``'s ``versions`` (their lineage records); only those
    of ``projects`` when given (a server's caller: its own projects'). The plans that do not hold
    one of the versions' refs (``"NAME@N"``, as every dataset input's record has it) are left in the
    database (a text match: a name common in commands, ``train``, narrows nothing alone); the others
    are read here."""
    wanted = set(versions)
    if not wanted:
        return 0
    text = cast(ExperimentRow.c.plan, String)
    query = select(ExperimentRow.c.plan).where(
        or_(*(text.contains(f'"{name}@{v}"', autoescape=True) for v in sorted(wanted)))
    )
    if projects is not None:
        query = query.where(ExperimentRow.c.project.in_(list(projects)))
    with store.engine.connect() as conn:
        plans = conn.execute(query).scalars()
        return sum(1 for plan in plans if _reads(plan, name, wanted))


def _reads(plan: Any, name: str, versions: set[int]) -> bool:
    records = plan.get("inputs") if isinstance(plan, Mapping) else None
    refs = {f"{name}@{v}" for v in versions}
    return any(
        isinstance(r, Mapping)
        and r.get("kind") == "dataset"
        and ((r.get("dataset") == name and r.get("version") in versions) or r.get("ref") in refs)
        for r in records or ()
    )
