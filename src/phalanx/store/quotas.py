"""Project quotas seen through the Store (callers outside ``phalanx.store`` never touch the SQL
engine): what a project may hold at once on a compute target and how many of its experiments may
wait. Implemented by the SQL store's table (``sql.quotas``; migration 0012_quotas_project_quotas).

``check`` is the one validation every door uses (CLI, API): a user's mistake is a UsageError that
names the field and how to fix it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from phalanx.errors import NotFound, UsageError
from phalanx.share import Limit, Quota

if TYPE_CHECKING:
    from phalanx.store.base import LocalStore

TARGET_MAX = 100


def check(project: str, target: str, limit: Limit) -> Quota:
    """The quota when every part is sound; UsageError naming the first bad part otherwise."""
    from phalanx.tracking.labels import label_problem  # why: `phalanx queue` reads the ledger alone

    problem = label_problem(project, "project")
    if problem:
        raise UsageError(problem)
    if not target or len(target) > TARGET_MAX or not target.replace("-", "").replace("_", "").isalnum():
        raise UsageError(
            f"target {target!r}: a compute target's name (letters, digits, '-' and '_');"
            " 'local' is this machine"
        )
    for name, value in (("cores", limit.cores), ("gpus", limit.gpus), ("max_waiting", limit.max_waiting)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise UsageError(
                f"{name} {value!r}: give a whole number of 0 or more (or leave it out: no limit)"
            )
    mem = limit.memory_mib
    if mem is not None and (
        isinstance(mem, bool) or not isinstance(mem, int | float) or not 0 <= mem < float("inf")
    ):
        raise UsageError(
            f"memory {mem!r}: give MiB of 0 or more, or a size such as 8G (or leave it out: no limit)"
        )
    if limit.empty:
        raise UsageError(
            "give at least one of cores, gpus, memory or max_waiting"
            " (to remove the quota: `phalanx quota rm`)"
        )
    return Quota(project, target, limit)


def put(store: LocalStore, quota: Quota) -> Quota:
    """Set (replace) the project's quota on the target, after ``check``."""
    from phalanx.store.accounts import check_project  # why: `phalanx queue` reads the ledger alone
    from phalanx.store.sql import quotas  # why: as above

    quota = check(quota.project, quota.target, quota.limit)
    check_project(store, quota.project)
    quotas.put(store.engine, quota)
    return quota


def get(store: LocalStore, project: str, target: str) -> Quota | None:
    from phalanx.store.sql import quotas  # why: `phalanx queue` reads the ledger alone

    return quotas.get(store.engine, project, target)


def list_quotas(store: LocalStore, target: str | None = None) -> list[Quota]:
    from phalanx.store.sql import quotas  # why: `phalanx queue` reads the ledger alone

    return quotas.list_quotas(store.engine, target)


def remove(store: LocalStore, project: str, target: str) -> None:
    """Remove the project's quota on the target. NotFound when it has none there: for a project a
    team server does not know, in ``check_project``'s words (one set while projects were labels is
    removed)."""
    from phalanx.store.accounts import check_project  # why: `phalanx queue` reads the ledger alone
    from phalanx.store.sql import quotas  # why: as above

    if quotas.remove(store.engine, project, target):
        return
    check_project(store, project)
    raise NotFound(f"project {project} has no quota on {target} (`phalanx quota ls` lists them)")


def limits(store: LocalStore, target: str) -> dict[str, Limit]:
    """Every project's limit on the target (what the queue's admission is given)."""
    return {q.project: q.limit for q in list_quotas(store, target)}
